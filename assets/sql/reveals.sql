-- reveals: one row per record of each `ledgerlake reveal`: who opened which sealed columns of it, and when (ids and column names, nothing personal).
create or replace view reveals as
select *
from {lake:reveals};
