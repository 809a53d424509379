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
ClipAlgorithm = Literal["norm", "value"]  # trainer.gradient_clip_algorithm
# trainer.profiler, as Lightning names its profilers (in any case: it lowers it; a test compares)
# but its TPUs' (xla), which needs torch_xla and failed with more than a line without it.
Profiler = Literal["simple", "advanced", "pytorch"]
# model.compile.mode: torch.compile's modes (``torch._inductor.list_mode_options``; a test
# compares them).
CompileMode = Literal[
    "default", "lite", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune"
]
NORMS: tuple[Norm, ...] = get_args(Norm)
MATMUL_PRECISIONS: tuple[MatmulPrecision, ...] = get_args(MatmulPrecision)
# trainer.precision: what runs on the CPU, and what needs CUDA (fp16 autocast, fp16 weights).
CPU_PRECISIONS = ("32-true", "64-true", "bf16-mixed", "bf16-true")
CUDA_PRECISIONS = (*CPU_PRECISIONS, "16-mixed", "16-true")
PRECISION_ALIASES = {"64": "64-true", "32": "32-true", "16": "16-mixed", "bf16": "bf16-mixed"}

# What the config's nodes build (their ``_target_``); the keys each takes are its model's fields
# (``multigpu.config.schema.BUILDS``), which the tests compare with ``inspect.signature``.
NETWORK = "multigpu.models.resnet18"
SGD = "torch.optim.SGD"
STEP_LR = "torch.optim.lr_scheduler.StepLR"
COSINE = "torch.optim.lr_scheduler.CosineAnnealingLR"
# The lengths a scheduler takes, in epochs; model.scheduler_interval=step turns them into steps.
SCHEDULER_EPOCH_KEYS = {STEP_LR: ("step_size",), COSINE: ("T_max",)}
FASHION_MNIST = "multigpu.data.FashionMNISTDataModule"
SYNTHETIC = "multigpu.data.SyntheticDataModule"
# Each data set's size, when it does not come from the config: (train, test, classes).
DATA_SIZES = {FASHION_MNIST: (60_000, 10_000, 10)}
IMAGE_CHANNELS = 1  # both data sets: 28x28 grey images
MODEL = "multigpu.models.ImageClassifier"
TENSORBOARD = "multigpu.callbacks.tensorboard_logger.EpochTensorBoardLogger"
CSV = "multigpu.callbacks.csv_logger.ContinuingCSVLogger"
SINGLE_DEVICE = "pytorch_lightning.strategies.SingleDeviceStrategy"
DATA_PARALLEL = "multigpu.strategies.DataParallelStrategy"
SCATTER_ALLREDUCE = "multigpu.strategies.ScatterAllreduceStrategy"
HYDRA_KEYS = ("_target_", "_partial_", "_recursive_", "_convert_", "_args_")  # any node's

# inspect.signature(pytorch_lightning.Trainer.__init__) without ``self``, the keys of the
# schema's Trainer model too, listed here as well because the typo check answers before
# Lightning and pydantic load (0.3 s here); tests/test_typos.py and tests/test_settings.py keep
# both equal to Lightning's signature.
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

# Trainer arguments the run sets itself, from the groups and keys that say them: a value in the
# trainer node would be silently replaced, so it is refused, naming where to say it.
SET_BY_THE_RUN = {
    "strategy": "the strategy group (strategy=ddp, dp, scatter_allreduce, single or auto)",
    "logger": "the logger group (logger=tensorboard or csv, or ~logger)",
    "callbacks": "the callbacks group (callbacks.<name>, or callbacks=none)",
    "enable_checkpointing": "callbacks.checkpoint (callbacks.checkpoint=null: no checkpoints)",
    "plugins": "the run's own choice (precision, checkpoint writing, cluster environment)",
    "use_distributed_sampler": "the data modules, which shard for DDP themselves",
}
