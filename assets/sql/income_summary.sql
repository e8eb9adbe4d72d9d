-- income_summary: one row per record, the service's income estimate for its customer.
create or replace view income_summary as
select *
from {lake:income};
