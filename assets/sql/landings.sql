-- landings: one row per record, product and run that landed it: landed (published), held (a
-- blocking check failed: the previous rows stay in view) or failed (nothing written), with
-- the rows, the pull and the lake version. A record's history of one product, newest first:
-- `select * from landings where record_id = 'REC' and product = 'transactions' order by
-- landed_at desc`.
create or replace view landings as
select *
from {lake:landings};
