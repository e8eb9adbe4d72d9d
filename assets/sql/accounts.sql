-- accounts: one row per account of every record in the lake.
create or replace view accounts as
select *
from {lake:accounts};
