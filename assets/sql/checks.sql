-- checks: one row per record, check and run that evaluated it: passed or not, and the first
-- problems as JSON. The failures a run found: `select * from checks where run_id = 'RUN' and
-- not passed`.
create or replace view checks as
select *
from {lake:checks};
