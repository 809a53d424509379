"""The names the config accepts for its choices, in one place: the code that implements them
and the checks that run before torch is imported both read them here.

A choice is a ``Literal`` type: the config's schema (``multigpu.config.schema``) annotates its
key with it, which is what the checks read, and the code that implements the choice takes it
as its argument's type."""

from typing import Literal, get_args

Norm = Literal["batch", "none"]  # model.net.norm
Pipeline = Literal["torchvision", "memory"]  # data.pipeline
LrRule = Literal["none", "linear"]  # model.lr_scaling.rule
StartMethod = Literal["auto", "popen", "spawn"]  # strategy.start_method (ddp)
SchedulerInterval = Literal["epoch", "step"]  # model.scheduler_interval
Decayed = Literal["all", "weights"]  # model.weight_decay_on
MatmulPrecision = Literal["highest", "high", "medium"]  # float32_matmul_precision
NORMS: tuple[Norm, ...] = get_args(Norm)
PIPELINES: tuple[Pipeline, ...] = get_args(Pipeline)
LR_RULES: tuple[LrRule, ...] = get_args(LrRule)
START_METHODS: tuple[StartMethod, ...] = get_args(StartMethod)
SCHEDULER_INTERVALS: tuple[SchedulerInterval, ...] = get_args(SchedulerInterval)
DECAYED: tuple[Decayed, ...] = get_args(Decayed)
MATMUL_PRECISIONS: tuple[MatmulPrecision, ...] = get_args(MatmulPrecision)
# trainer.precision: what runs on the CPU, and what needs CUDA (fp16 autocast, fp16 weights).
CPU_PRECISIONS = ("32-true", "64-true", "bf16-mixed", "bf16-true")
CUDA_PRECISIONS = (*CPU_PRECISIONS, "16-mixed", "16-true")
PRECISION_ALIASES = {"64": "64-true", "32": "32-true", "16": "16-mixed", "bf16": "bf16-mixed"}

# The keyword arguments of what a config node builds (its ``_target_``), known without importing
# torch, so that a key the target does not take is refused before anything loads; the tests
# compare each list with ``inspect.signature`` of the real thing. Hydra's own keys (``_target_``,
# ``_partial_``, ...) are always allowed.
NETWORK = "multigpu.models.resnet18"
NETWORK_KEYS = ("num_classes", "in_channels", "width", "norm", "init_std", "zero_init_residual")
SGD = "torch.optim.SGD"
# SGD's arguments that change what is trained; its implementation switches (foreach, fused,
# differentiable) and maximize (it would climb the loss) are left out.
SGD_KEYS = ("lr", "momentum", "dampening", "weight_decay", "nesterov")
STEP_LR = "torch.optim.lr_scheduler.StepLR"
COSINE = "torch.optim.lr_scheduler.CosineAnnealingLR"
# Schedulers this project checks (``conf/model/scheduler``); last_epoch is Lightning's to set.
SCHEDULER_KEYS = {STEP_LR: ("step_size", "gamma"), COSINE: ("T_max", "eta_min")}
SCHEDULER_REQUIRED = {STEP_LR: ("step_size",), COSINE: ("T_max",)}  # no default in torch
# The lengths a scheduler takes, in epochs; model.scheduler_interval=step turns them into steps.
SCHEDULER_EPOCH_KEYS = {STEP_LR: ("step_size",), COSINE: ("T_max",)}
# What the base data module takes, and what each data set adds; batch_size_per_device is read
# by the settings (the data module gets the batch it computes).
DATA_KEYS = (
    *("batch_size", "num_workers", "seed", "train_subset", "test_subset", "val_size"),
    *("pin_memory", "shuffle", "pipeline", "augment", "crop_padding", "flip", "drop_last"),
)
FASHION_MNIST = "multigpu.data.FashionMNISTDataModule"
SYNTHETIC = "multigpu.data.SyntheticDataModule"
DATA_MODULE_KEYS = {
    FASHION_MNIST: (*DATA_KEYS, "root", "source", "download", "normalize"),
    SYNTHETIC: (*DATA_KEYS, "num_train", "num_test", "num_classes"),
}
CONFIG_ONLY_DATA_KEYS = ("batch_size_per_device",)
# Each data set's size, when it does not come from the config: (train, test, classes).
DATA_SIZES = {FASHION_MNIST: (60_000, 10_000, 10)}
IMAGE_CHANNELS = 1  # both data sets: 28x28 grey images
# The model group's own keys (multigpu.models.ImageClassifier; lr_scaling is the settings').
MODEL = "multigpu.models.ImageClassifier"
MODEL_KEYS = (
    *("net", "optimizer", "scheduler", "channels_last", "compile", "lr_scaling"),
    *("label_smoothing", "tta_flip", "scheduler_interval", "weight_decay_on"),
)
COMPILE_KEYS = ("fullgraph", "dynamic", "backend", "mode", "options", "disable")  # torch.compile
# torch.compile's modes (``torch._inductor.list_mode_options``; a test compares them).
COMPILE_MODES = ("default", "lite", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune")
# The strategies whose every argument is ours to know; DDP passes extra keys on to Lightning's
# DDPStrategy (as the trainer does to Trainer), which answers them itself.
STRATEGY_KEYS = {
    "pytorch_lightning.strategies.SingleDeviceStrategy": (),
    "multigpu.strategies.DataParallelStrategy": (),
    "multigpu.strategies.ScatterAllreduceStrategy": (
        "split_weights",
        "trace_shapes",
        "trace_steps",
    ),
}
# The config's nodes beside its own keys (schema.Top): its groups', and Hydra's when composed.
TOP_NODES = ("data", "model", "trainer", "strategy", "logger", "callbacks", "paths", "hydra")
HYDRA_KEYS = ("_target_", "_partial_", "_recursive_", "_convert_", "_args_")

# inspect.signature(pytorch_lightning.Trainer.__init__) without ``self``, read once so that a
# typo is found without importing Lightning (tests/test_typos.py fails when Lightning changes
# it). The config's trainer node holds these only (multigpu.config.settings.check_keys).
TRAINER_ARGUMENTS = (
    "accelerator",
    "strategy",
    "devices",
    "num_nodes",
    "precision",
    "logger",
    "callbacks",
    "fast_dev_run",
    "max_epochs",
    "min_epochs",
    "max_steps",
    "min_steps",
    "max_time",
    "limit_train_batches",
    "limit_val_batches",
    "limit_test_batches",
    "limit_predict_batches",
    "overfit_batches",
    "val_check_interval",
    "check_val_every_n_epoch",
    "num_sanity_val_steps",
    "log_every_n_steps",
    "enable_checkpointing",
    "enable_progress_bar",
    "enable_model_summary",
    "accumulate_grad_batches",
    "gradient_clip_val",
    "gradient_clip_algorithm",
    "deterministic",
    "benchmark",
    "inference_mode",
    "use_distributed_sampler",
    "profiler",
    "detect_anomaly",
    "barebones",
    "plugins",
    "sync_batchnorm",
    "reload_dataloaders_every_n_epochs",
    "default_root_dir",
    "enable_autolog_hparams",
    "model_registry",
)
