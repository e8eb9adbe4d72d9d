"""The pipeline: its Definitions, sensors, schedules, jobs, the receiver and the CLI."""

import warnings

# Dagster 1.13 says every sensor's `owners` is beta, ours included though none sets it: noise
# in every command's output (dagster is not imported here: the receiver starts without it)
warnings.filterwarnings("ignore", message=r"Parameter `owners` of initializer `SensorDefinition")
