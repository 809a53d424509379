"""Config mistakes, each with the text of the one ``error:`` line that answers it: the one list
of them. The tests check every case in-process against the checks that run before torch
(``multigpu.run.command_line``: the names, then the values by
``multigpu.config.settings.resolve_run``), and a few as real
``python train.py`` runs that must answer without importing torch; the start-up benchmark
(``python -m multigpu.tools.bench.startup``) times the ones it names as a user meets them.

Overrides as on the command line, after ``TINY`` (a narrow one-epoch CPU run); the machine is
this one (``CORES``)."""

from __future__ import annotations

import os

CORES = os.cpu_count() or 1

MISTAKES: dict[str, tuple[list[str], str]] = {
    # Devices, processes and the batch.
    "devices_more_than_cpu_cores": (
        ["strategy=ddp", f"trainer.devices={CORES + 1}"],
        f"this machine has {CORES} CPU cores: use trainer.devices<={CORES}",
    ),
    "devices_zero": (["trainer.devices=0"], "trainer.devices=0 must be at least 1"),
    "devices_negative": (["trainer.devices=-3"], "trainer.devices=-3 must be at least 1"),
    "device_ids_without_cuda": (
        ["trainer.accelerator=gpu", "trainer.devices=[0,7]"],
        "trainer.accelerator=gpu but this machine has no CUDA device: use trainer.accelerator=cpu",
    ),
    "device_ids_negative": (
        ["strategy=scatter_allreduce", "trainer.devices=[0,-1]"],
        "must list device ids >= 0",
    ),
    "batch_zero": (["data.batch_size=0"], "data.batch_size=0 must be a positive integer"),
    "batch_smaller_than_ddp_processes": (
        ["strategy=ddp", "trainer.devices=2", "data.batch_size=1"],
        "data.batch_size=1 (global) does not divide over 2 processes",
    ),
    "lr_zero": (["model.optimizer.lr=0"], "model.optimizer.lr=0 must be a positive number"),
    "lr_negative": (["model.optimizer.lr=-0.1"], "model.optimizer.lr=-0.1 must be a positive"),
    "lr_not_a_number": (["model.optimizer.lr=fast"], "model.optimizer.lr='fast' must be a"),
    "width_zero": (["model.net.width=0"], "model.net.width=0 must be a positive integer"),
    "unknown_norm": (["model.net.norm=group"], "model.net.norm='group' is not known: use one"),
    "unknown_strategy": (
        ["strategy=horovod"],
        "strategy=horovod is not an option of strategy (options: auto, ddp, ddp_spawn, dp,",
    ),
    "unknown_group_option": (
        ["data=cifar10"],
        "data=cifar10 is not an option of data (options: fashion_mnist, synthetic)",
    ),
    "dp_several_devices_on_cpu": (
        ["strategy=dp", "trainer.devices=2"],
        "DataParallel needs CUDA",
    ),
    "split_weights_count": (
        ["strategy=scatter_allreduce", "trainer.devices=2", "strategy.split_weights=[1]"],
        "strategy.split_weights=[1] has 1 entries for 2 devices",
    ),
    "split_weights_negative": (
        ["strategy=scatter_allreduce", "trainer.devices=2", "strategy.split_weights=[1,-1]"],
        "must be numbers >= 0",
    ),
    "split_weights_zero_sum": (
        ["strategy=scatter_allreduce", "trainer.devices=2", "strategy.split_weights=[0,0]"],
        "sum to 0",
    ),
    "split_weights_not_numbers": (
        ["strategy=scatter_allreduce", "trainer.devices=2", "strategy.split_weights=[1,a]"],
        "strategy.split_weights=[1, 'a'] must be a list of numbers or null, e.g. "
        "strategy.split_weights=[0.6,0.4]",
    ),
    "seed_not_a_number": (["seed=abc"], "seed='abc' must be an integer or null, e.g. seed=42"),
    "seed_negative": (["seed=-1"], "seed=-1 must be between 0 and 4294967295"),
    "max_epochs_negative": (
        ["trainer.max_epochs=-5"],
        "trainer.max_epochs=-5 must be -1 (no limit) or more",
    ),
    "max_epochs_dropped": (
        ["~trainer.max_epochs"],
        "trainer.max_epochs is null (or dropped) and nothing else ends the run: Lightning "
        "would train 1000 epochs",
    ),
    "max_epochs_null": (["trainer.max_epochs=null"], "Lightning would train 1000 epochs"),
    "output_dir_set": (
        ["paths.output_dir=/"],
        "paths.output_dir=/: paths.output_dir is the folder Hydra makes for the job; choose it "
        "with hydra.run.dir=<folder>",
    ),
    "fp16_on_the_cpu": (
        ["trainer.precision=16-mixed"],
        "trainer.precision=16-mixed is not supported on cpu (fp16 needs CUDA; on the CPU use "
        "bf16-mixed)",
    ),
    "pipeline_unknown": (["data.pipeline=fast"], "data.pipeline='fast' is not known: use one"),
    "augment_not_a_bool": (["data.augment=maybe"], "data.augment='maybe' must be true or false"),
    "compile_not_a_bool": (["model.compile=maybe"], "model.compile='maybe' must be true, false"),
    # Found only by Lightning or by the data: after the import, still one line.
    "lightning_refuses_an_argument": (
        ["+trainer.no_such_argument=1"],
        "+trainer.no_such_argument is not an argument of Lightning's Trainer",
    ),
    "num_classes_not_the_datas": (
        ["model.net.num_classes=5"],
        "model.net.num_classes=5 but the data has 10 classes: set model.net.num_classes=10",
    ),
    # Layouts and single values.
    "dp_several_cpu_devices": (["strategy=dp", "trainer.devices=2"], "DataParallel needs CUDA"),
    "single_on_two_devices": (
        ["strategy=single", "trainer.devices=2"],
        "strategy=single runs on one device",
    ),
    "scatter_allreduce_on_two_nodes": (
        ["strategy=scatter_allreduce", "trainer.num_nodes=2"],
        "use strategy=ddp for several",
    ),
    "num_nodes_zero": (["trainer.num_nodes=0"], "trainer.num_nodes=0 must be a positive integer"),
    "batch_over_ddp_processes": (
        ["strategy=ddp", "trainer.devices=2", "data.batch_size=5"],
        "does not divide over 2",
    ),
    "batch_per_device_zero": (
        ["data.batch_size_per_device=0"],
        "data.batch_size_per_device=0 must be a positive",
    ),
    "lr_rule_unknown": (
        ["model.lr_scaling.rule=sqrt"],
        "model.lr_scaling.rule='sqrt' is not known",
    ),
    "start_method_unknown": (
        ["strategy=ddp", "strategy.start_method=fork"],
        "strategy.start_method='fork'",
    ),
    "accelerator_unknown": (
        ["trainer.accelerator=tpu"],
        "trainer.accelerator='tpu' is not supported",
    ),
    "init_std_zero": (["model.net.init_std=0"], "model.net.init_std=0 must be positive, or null"),
    "num_classes_one": (["model.net.num_classes=1"], "model.net.num_classes=1 must be 2 or more"),
    "momentum_negative": (
        ["model.optimizer.momentum=-0.5"],
        "model.optimizer.momentum=-0.5 must be 0 or more",
    ),
    "train_subset_zero": (
        ["data.train_subset=0"],
        "data.train_subset=0 must be a positive integer",
    ),
    "max_steps_below_minus_one": (
        ["+trainer.max_steps=-2"],
        "trainer.max_steps=-2 must be -1 (no limit) or more",
    ),
    "seed_null_leaves_the_split_seed_without_a_value": (
        ["seed=null"],
        "data.seed=null must be an integer, e.g. data.seed=42 (it follows ${seed}: set "
        "data.seed itself as well)",
    ),
    "compile_mode_unknown": (
        ["model.compile={mode:bogus}"],
        "model.compile.mode='bogus' is not known: use one of default, lite, reduce-overhead",
    ),
    "limit_val_batches_negative": (
        ["+trainer.limit_val_batches=-1"],
        "trainer.limit_val_batches=-1 must be 0 (no evaluation: no test accuracy) or 1.0",
    ),
    "limit_val_batches_one_batch": (
        ["+trainer.limit_val_batches=1"],
        "trainer.limit_val_batches=1 must be 0 (no evaluation: no test accuracy) or 1.0",
    ),
    "limit_val_batches_part_of_the_test_set": (
        ["+trainer.limit_val_batches=0.5"],
        "trainer.limit_val_batches=0.5 must be 0 (no evaluation: no test accuracy) or 1.0 (the "
        "whole test set; to test on fewer images, data.test_subset=<images>)",
    ),
    "max_time_zero": (
        ["+trainer.max_time=00:00:00:00"],
        "trainer.max_time=00:00:00:00 leaves no time to train: give a duration above 0",
    ),
    "barebones": (  # Lightning refused it only once torch had loaded (6 s), or ran with no figures
        ["+trainer.barebones=true"],
        "trainer.barebones=true must be false: barebones mode turns off self.log",
    ),
    "barebones_null": (["++trainer.barebones=null"], "trainer.barebones=null must be false"),
    "trainer_strategy_set_by_the_run": (
        ["+trainer.strategy=ddp"],
        "trainer.strategy is set by the run from the strategy group (strategy=ddp, dp, "
        "scatter_allreduce, single or auto): drop trainer.strategy and say it there",
    ),
    "trainer_checkpointing_set_by_the_run": (
        ["+trainer.enable_checkpointing=false"],
        "trainer.enable_checkpointing is set by the run from callbacks.checkpoint",
    ),
    "val_check_interval_beyond_the_epoch": (  # 60,000 images in batches of 256: 235
        ["+trainer.val_check_interval=1000"],
        "trainer.val_check_interval=1000 is more than the 235 training batches of an epoch",
    ),
    "min_epochs_above_max_epochs": (
        ["+trainer.min_epochs=5", "trainer.max_epochs=2"],
        "trainer.min_epochs=5 is more than trainer.max_epochs=2: Lightning would stop at 2",
    ),
    "min_steps_above_max_steps": (
        ["+trainer.min_steps=50", "+trainer.max_steps=10"],
        "trainer.min_steps=50 is more than trainer.max_steps=10",
    ),
    "deterministic_not_a_choice": (
        ["+trainer.deterministic=xyz"],
        "trainer.deterministic=xyz must be true, false, warn or null",
    ),
    "clip_algorithm_not_a_choice": (
        ["+trainer.gradient_clip_algorithm=l2"],
        "trainer.gradient_clip_algorithm='l2' is not known: use one of norm, value",
    ),
    "progress_bar_not_a_flag": (
        ["+trainer.enable_progress_bar=maybe"],
        "trainer.enable_progress_bar='maybe' must be true, false or null",
    ),
    "max_time_not_a_duration": (["+trainer.max_time=1:30"], "trainer.max_time=1:30 is not a"),
    "profiler_not_a_choice": (
        ["+trainer.profiler=sideways"],
        "trainer.profiler='sideways' is not known: use one of simple, advanced, pytorch",
    ),
    "top_level_key_dropped": (  # had been a ConfigAttributeError once the run's folder was made
        ["~check_finite_every_n_steps"],
        "check_finite_every_n_steps is missing from the config: training needs it",
    ),
    "csv_flush_zero": (  # had been a ZeroDivisionError once the run's folder was made
        ["logger=csv", "+logger.flush_logs_every_n_steps=0"],
        "logger.flush_logs_every_n_steps=0 must be 1 or more",
    ),
    "tensorboard_queue_not_a_number": (  # had been a TypeError, likewise
        ["+logger.max_queue=abc"],
        "logger.max_queue='abc' must be an integer, e.g. logger.max_queue=10",
    ),
    "tensorboard_suffix_a_path": (  # had written its events elsewhere, or failed
        ["+logger.filename_suffix=/../x"],
        "logger.filename_suffix=/../x must be a file name's end: no /, at most 128 bytes",
    ),
    "logger_version_above_its_folder": (
        ["logger.version=.."],
        "logger.version=.. must be a folder below logger.save_dir (no .., not from / or ~)",
    ),
    "logger_name_from_home": (  # had made a folder named ~ in the run's
        ["logger.name='~/tb'"],
        "logger.name=~/tb must be a folder below logger.save_dir",
    ),
    "logger_name_from_root": (
        ["logger.name=/tmp/tb"],
        "logger.name=/tmp/tb must be a folder below logger.save_dir",
    ),
    "logger_key_unknown": (
        ["+logger.max_queu=3"],
        "logger.max_queu is not a setting of the logger: did you mean logger.max_queue?",
    ),
    "accumulate_grad_batches_zero": (  # had been a ZeroDivisionError mid-epoch
        ["+trainer.accumulate_grad_batches=0"],
        "trainer.accumulate_grad_batches=0 must be 1 or more (the batches whose gradients each "
        "optimizer step sums; 1: every batch)",
    ),
    "accumulate_grad_batches_fraction": (  # had never stepped the optimizer
        ["+trainer.accumulate_grad_batches=1.5"],
        "trainer.accumulate_grad_batches=1.5 must be an integer",
    ),
    "limit_test_batches_fraction_above_one": (  # Lightning refused it once the folder existed
        ["+trainer.limit_test_batches=1.5"],
        "trainer.limit_test_batches=1.5 must be 0 or more (a whole number of batches, or a "
        "fraction up to 1.0)",
    ),
    "limit_train_batches_no_batch": (  # Lightning refused it once the folder existed
        ["+trainer.limit_train_batches=0.001"],
        "trainer.limit_train_batches=0.001 of the 235 training batches of an epoch is no batch: "
        "use at least 0.00426, or a number of batches (e.g. 1)",
    ),
    "overfit_batches_tests_on_part": (
        ["+trainer.overfit_batches=2"],
        "trainer.overfit_batches=2 must be 0: Lightning would test on the same share of the "
        "test set",
    ),
    "val_check_interval_zero": (
        ["+trainer.val_check_interval=0"],
        "trainer.val_check_interval=0 must be more than 0",
    ),
    "limit_train_batches_zero": (
        ["+trainer.limit_train_batches=0"],
        "trainer.limit_train_batches=0 must be more than 0",
    ),
    "timeout_zero": (
        ["strategy=ddp", "strategy.timeout_s=0"],
        "strategy.timeout_s=0 must be positive",
    ),
    "check_finite_zero": (
        ["check_finite_every_n_steps=0"],
        "check_finite_every_n_steps=0 must be 1 or more",
    ),
    "precision_unknown": (
        ["trainer.precision=transformer-engine"],
        "is not supported on cpu: use one of",
    ),
    "num_nodes_not_a_number": (
        ["trainer.num_nodes=two"],
        "trainer.num_nodes='two' must be an integer, e.g.",
    ),
    "flip_not_a_bool": (
        ["data.flip=sideways"],
        "data.flip='sideways' must be true or false, e.g. data.flip=true",
    ),
    # Non-finite numbers, wherever a float is taken.
    "lr_nan": (["model.optimizer.lr=nan"], "model.optimizer.lr=nan must be a finite number"),
    "lr_inf": (["model.optimizer.lr=inf"], "model.optimizer.lr=inf must be a finite number"),
    "momentum_nan": (["model.optimizer.momentum=nan"], "model.optimizer.momentum=nan must be"),
    "weight_decay_inf": (["model.optimizer.weight_decay=-inf"], "weight_decay=-inf must be a"),
    "init_std_nan": (["model.net.init_std=nan"], "model.net.init_std=nan must be a finite"),
    "warmup_inf": (["model.lr_scaling.warmup_epochs=inf"], "warmup_epochs=inf must be a finite"),
    "timeout_nan": (["strategy=ddp", "strategy.timeout_s=nan"], "strategy.timeout_s=nan must be"),
    "split_weights_nan": (
        ["strategy=scatter_allreduce", "trainer.devices=2", "strategy.split_weights=[nan,1]"],
        "strategy.split_weights=[nan, 1] must hold finite numbers only",
    ),
    "clip_inf": (["+trainer.gradient_clip_val=inf"], "trainer.gradient_clip_val=inf must be a"),
    "gamma_nan": (["+model/scheduler=step", "model.scheduler.gamma=nan"], "gamma=nan must be a"),
    "eta_min_inf": (
        ["+model/scheduler=cosine", "+model.scheduler.eta_min=inf"],
        "model.scheduler.eta_min=inf must be a finite number",
    ),
    # Devices that are not a count or a list of ids.
    "devices_float": (["trainer.devices=1.5"], "trainer.devices=1.5 must be a count or a list"),
    "devices_null": (["trainer.devices=null"], "trainer.devices=null must be a count or a list"),
    "devices_twice": (
        ["strategy=ddp", "trainer.devices=[0,0]"],
        "trainer.devices=[0, 0] names device 0 twice, which strategy=ddp cannot share",
    ),
    "devices_twice_dp": (
        ["strategy=dp", "trainer.devices=[1,1]"],
        "names device 1 twice, which strategy=dp cannot share: list each device once (several "
        "replicas on one device: strategy=scatter_allreduce)",
    ),
    "devices_huge": (["trainer.devices=10000000000"], "is more devices than any machine has"),
    # Several machines without anything to start the others' processes.
    "nodes_without_launcher": (
        ["strategy=ddp", "trainer.num_nodes=2"],
        "trainer.num_nodes=2 needs a launcher that starts the other machines' processes: "
        "torchrun --nnodes=2",
    ),
    # The scheduler.
    "step_size_zero": (
        ["+model/scheduler=step", "model.scheduler.step_size=0"],
        "model.scheduler.step_size=0 must be 1 or more",
    ),
    "gamma_zero": (
        ["+model/scheduler=step", "model.scheduler.gamma=0"],
        "model.scheduler.gamma=0 must be positive",
    ),
    "cosine_without_end": (
        ["+model/scheduler=cosine", "trainer.max_epochs=-1"],
        "model.scheduler.T_max=-1 follows trainer.max_epochs=-1 (no limit)",
    ),
    "cosine_shorter_than_run": (
        ["+model/scheduler=cosine", "trainer.max_epochs=4", "model.scheduler.T_max=2"],
        "model.scheduler.T_max=2 is shorter than the run (trainer.max_epochs=4)",
    ),
    "scheduler_interval_unknown": (
        ["model.scheduler_interval=batch"],
        "model.scheduler_interval='batch' is not known: use one of epoch, step",
    ),
    "weight_decay_on_unknown": (
        ["model.weight_decay_on=norms"],
        "model.weight_decay_on='norms' is not known: use one of all, weights",
    ),
    "float32_matmul_precision_unknown": (
        ["float32_matmul_precision=tf32"],
        "float32_matmul_precision='tf32' is not known: use one of highest, high, medium",
    ),
    "float32_matmul_precision_not_a_name": (
        ["float32_matmul_precision=32"],
        "float32_matmul_precision=32 must be highest or high or medium, "
        "e.g. float32_matmul_precision=high",
    ),
    "label_smoothing_one": (
        ["model.label_smoothing=1.0"],
        "model.label_smoothing=1.0 must be 0 or more and less than 1",
    ),
    "evaluation_skips_the_last_epoch": (
        ["trainer.max_epochs=3", "+trainer.check_val_every_n_epoch=2"],
        "trainer.check_val_every_n_epoch=2 does not divide trainer.max_epochs=3",
    ),
    "cosine_floor_above_lr": (
        ["+model/scheduler=cosine", "+model.scheduler.eta_min=0.5"],
        "model.scheduler.eta_min=0.5 is above the learning rate 0.1",
    ),
    "unknown_scheduler": (
        ["++model.scheduler={_target_:torch.optim.lr_scheduler.ExponentialLR,gamma:0.9}"],
        "model.scheduler._target_='torch.optim.lr_scheduler.ExponentialLR' is not a scheduler "
        "this project checks: use +model/scheduler=step or cosine",
    ),
    "scheduler_key": (
        ["+model/scheduler=step", "+model.scheduler.T_max=3"],
        "model.scheduler.T_max is not a setting of the scheduler: use one of step_size, gamma",
    ),
    "experiments_key_over_other_data": (
        ["experiment=d2l", "data=synthetic"],
        "data.normalize is not a setting of data=synthetic: use one of batch_size, num_workers, "
        "seed, train_subset, test_subset, val_size, pin_memory, shuffle, pipeline, augment, "
        "crop_padding, flip, drop_last, batch_size_per_device, num_train, num_test, num_classes "
        "(where a config sets it, drop it: ~data.normalize)",
    ),
    # Values that contradict each other or the data.
    "val_size_all": (["data.val_size=60000"], "data.val_size=60000 leaves no training images"),
    "val_size_after_subset": (
        ["data.train_subset=500", "data.val_size=500"],
        "data.val_size=500 leaves no training images: data=fashion_mnist has 60000, 500 after "
        "data.train_subset=500; use at most 499",
    ),
    "test_set_smaller_than_the_processes": (
        ["strategy=ddp", "trainer.devices=2", "data.test_subset=1"],
        "the test set has 1 image(s) for 2 processes, which evaluate a share each: "
        "data=fashion_mnist needs data.test_subset>=2, or fewer processes",
    ),
    "val_split_smaller_than_the_processes": (
        ["strategy=ddp", "trainer.devices=2", "data.val_size=1"],
        "the validation split has 1 image(s) for 2 processes",
    ),
    "train_subset_too_large": (
        ["data.train_subset=60001"],
        "data.train_subset=60001 is more than the 60000 training images of data=fashion_mnist",
    ),
    "synthetic_subset_too_large": (
        ["data=synthetic", "data.num_train=64", "data.train_subset=65"],
        "data.train_subset=65 is more than the 64 training images of data=synthetic "
        "(data.num_train=64)",
    ),
    "test_subset_zero": (["data.test_subset=0"], "data.test_subset=0 must be a positive integer"),
    "test_subset_too_large": (["data.test_subset=10001"], "more than the 10000 test images"),
    "max_epochs_zero": (["trainer.max_epochs=0"], "trainer.max_epochs=0 must be -1 (no limit)"),
    "classes_not_the_datas": (
        ["data=synthetic", "data.num_classes=3"],
        "model.net.num_classes=10 but the data has 3 classes (data.num_classes=3): set "
        "model.net.num_classes=3",
    ),
    "channels_not_the_images": (["model.net.in_channels=3"], "model.net.in_channels=3 but the"),
    "warmup_longer_than_run": (
        ["model.lr_scaling.warmup_epochs=2"],
        "model.lr_scaling.warmup_epochs=2 is longer than the run (trainer.max_epochs=1)",
    ),
    "scaled_lr_overflows": (
        ["model.lr_scaling.rule=linear", "model.lr_scaling.base_batch=1"]
        + ["model.optimizer.lr=1e308"],
        "(model.lr_scaling.rule=linear) is inf, not a learning rate",
    ),
    "nesterov_without_momentum": (
        ["model.optimizer.nesterov=true"],
        "model.optimizer.nesterov=true needs model.optimizer.momentum > 0",
    ),
    # Keys the network (or another node) does not take.
    "network_key": (
        ["+model.net.foo=1"],
        "model.net.foo is not a setting of the network: use one of num_classes, in_channels, "
        "width, norm, init_std, zero_init_residual",
    ),
    "optimizer_key": (["+model.optimizer.betas=[0.9,0.99]"], "model.optimizer.betas is not a"),
    "data_key": (["++data.num_train=5"], "data.num_train is not a setting of data=fashion_mnist"),
    "strategy_key": (
        ["strategy=single", "++strategy.timeout_s=5"],
        "strategy.timeout_s is not a setting of strategy=single: it takes none",
    ),
    "compile_key": (["model.compile={fast:true}"], "model.compile.fast is not a setting of"),
    # Types, strictly, and what cannot be resolved.
    "quoted_number": (["model.net.width='8'"], "model.net.width='8' must be an integer"),
    "number_for_a_path": (["data.root=2024"], "(quote a name that looks like a number: "),
    "empty_path": (["data.root=''"], "data.root='' names no path"),
    "unknown_top_level_key": (["+sed=1"], "sed is not a setting of the config: did you mean seed?"),
    "empty_source": (["data.source=''"], "(it follows MULTIGPU_DATA: unset that if it is empty)"),
    "interpolation": (
        ["data.batch_size=${nosuch}"],
        "cannot be resolved (Interpolation key 'nosuch' not found)",
    ),
    "huge_integer": (["data.num_workers=100000000000000000000"], "more than torch's 64-bit"),
    "workers": (["data.num_workers=100000"], "data.num_workers=100000 must be between 0 and 256"),
}
