"""The names the config accepts for its choices, in one place: the code that implements them
and the checks that run before torch is imported both read them here."""

NORMS = ("batch", "none")  # model.net.norm
PIPELINES = ("torchvision", "memory")  # data.pipeline
LR_RULES = ("none", "linear")  # model.lr_scaling.rule
START_METHODS = ("auto", "popen", "spawn")  # strategy.start_method (ddp)
# trainer.precision: what runs on the CPU, and what needs CUDA (fp16 autocast, fp16 weights).
CPU_PRECISIONS = ("32-true", "64-true", "bf16-mixed", "bf16-true")
CUDA_PRECISIONS = (*CPU_PRECISIONS, "16-mixed", "16-true")
PRECISION_ALIASES = {"64": "64-true", "32": "32-true", "16": "16-mixed", "bf16": "bf16-mixed"}
