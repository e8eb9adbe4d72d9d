-- latest_balances: the latest snapshot per account (the newest fetch; on a tie, the newest
-- figure the service stamped). A lake table the warehouse's build keeps, not a view: a window
-- over every snapshot cannot take a filter that comes through a join (one customer's records,
-- a semi-join), so as a view it ranked the whole history for each such question. The
-- warehouse's view `balances` shows it.
create or replace view latest_balances as
select *
from {lake:balance_history}
qualify row_number() over (
    partition by record_id, account_id
    order by fetched_at desc, service_updated_at desc nulls last
) = 1;
