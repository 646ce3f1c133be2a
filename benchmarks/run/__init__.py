"""The run layer: build, train, evaluate and write one configuration; it reads no suite file.
"""

from benchmarks.run.cache import ENCODER_FILE, resolved_config, run_dir
from benchmarks.run.curves import LOGGERS
from benchmarks.run.one import instantiate, run_one
from benchmarks.run.trainer import RunOptions

__all__ = ["ENCODER_FILE", "LOGGERS", "RunOptions", "instantiate", "resolved_config", "run_dir",
           "run_one"]
