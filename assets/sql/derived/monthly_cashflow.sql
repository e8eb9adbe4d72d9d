-- monthly_cashflow: money in, money out and the net per account and calendar month, in the
-- customer's time zone (LEDGERLAKE_TIMEZONE, Africa/Lagos by default) and by each line's
-- value date (trans_date). inflow sums the credits and outflow the debits, both as positive
-- naira, exactly (decimal sums); net = inflow - outflow. Pending lines (not posted yet, maybe
-- never: no cleared_date) are left out.
create or replace view monthly_cashflow as
select
    record_id,
    account_id,
    date_trunc('month', timezone({timezone}, trans_date))::date as month,
    any_value(currency)                                         as currency,
    count(*)                                                    as transactions,
    coalesce(sum(credit), 0)                                    as inflow,
    coalesce(sum(debit), 0)                                     as outflow,
    coalesce(sum(credit), 0) - coalesce(sum(debit), 0)          as net
from {lake:transactions}
where cleared_date is not null
group by all;
