"""One record (a user's connection to one bank) is one dynamic partition, keyed by its id."""

from dagster import DynamicPartitionsDefinition

records = DynamicPartitionsDefinition(name="records")
