"""Files: the run record, checkpoints and run-folder ownership, each written whole or not at
all and read back with checks, so that a crash or a bad file never passes for a good one."""
