import warnings

# Dagster 1.13 calls every sensor's `owners` beta, unset in ours: noise (no dagster import here)
warnings.filterwarnings("ignore", message=r"Parameter `owners` of initializer `SensorDefinition")
