-- balances: the latest snapshot per account (the newest fetch; on a tie, the newest figure
-- the service stamped).
-- needs: balance_history
create or replace view balances as
select *
from balance_history
qualify row_number() over (
    partition by record_id, account_id  -- a filter on record_id reaches the scan
    order by fetched_at desc, service_updated_at desc nulls last
) = 1;
