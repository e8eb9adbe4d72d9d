-- One row per account of every record in the lake.
create or replace view accounts as
select *
from read_parquet('{lake}/accounts/*/*.parquet', hive_partitioning = true, union_by_name = true);
