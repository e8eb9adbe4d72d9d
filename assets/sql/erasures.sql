-- erasures: one row per record and lake table of each `ledgerlake forget` pass: what was erased, when and why (ids and counts, nothing personal).
create or replace view erasures as
select *
from {lake:erasures};
