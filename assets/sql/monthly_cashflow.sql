-- monthly_cashflow: money in, money out and the net per account and calendar month (UTC).
-- inflow sums the credits and outflow the debits, both as positive naira; net = inflow -
-- outflow. Rounded to kobo, since float sums drift in the last digits.
-- needs: transactions
create or replace view monthly_cashflow as
select
    record_id,
    account_id,
    date_trunc('month', timezone('UTC', trans_date))::date as month,
    any_value(currency)                                    as currency,
    count(*)                                               as transactions,
    round(coalesce(sum(credit), 0), 2)                     as inflow,
    round(coalesce(sum(debit), 0), 2)                      as outflow,
    round(coalesce(sum(credit), 0) - coalesce(sum(debit), 0), 2) as net
from transactions
group by all;
