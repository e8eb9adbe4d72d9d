-- daily_balances: one row per account per day (the customer's day: LEDGERLAKE_TIMEZONE,
-- Africa/Lagos by default), from the account's first known day to its last, each day holding
-- the balance at the end of that day, exact (decimal naira).
--
-- Where the figure comes from, best first:
--   1. `transactions`: on a day with posted lines, the running balance of the last line
--      posted that day (by cleared_date, then transaction_id: the running balance follows
--      posting, so a line posted back-dated counts on the day it posted; pending lines carry
--      no balance). Lines are the ground truth and the freshest: the service's periodic
--      history is cut once a day and its last day may be partial.
--   2. `balance_periodic`: the service's own end-of-day history (its own dates), for days
--      without lines.
--      It alone knows the balance before an account's first line, and it carries the
--      available balance, which lines do not.
--   3. carried forward: a day with neither takes the last known balance before it.
-- Either lake table may be missing (a record fetched only one of them): it reads as empty.
create or replace view daily_balances as
with lines as (
    select
        record_id,
        account_id,
        timezone({timezone}, cleared_date)::date as date,
        cleared_date,
        transaction_id,
        balance
    from {lake:transactions}
    where balance is not null and cleared_date is not null  -- posted lines only
),

from_lines as (
    select
        record_id,
        account_id,
        date,
        arg_max(balance, (cleared_date, transaction_id)) as balance
    from lines
    group by all
),

from_periodic as (
    select record_id, account_id, date, ledger_balance as balance, available_balance
    from {lake:balance_periodic}
),

known as (
    select
        record_id,
        account_id,
        date,
        coalesce(l.balance, p.balance) as balance,
        p.available_balance,
        case when l.balance is not null then 'transactions' else 'periodic' end as source
    from from_lines as l
    full outer join from_periodic as p using (record_id, account_id, date)
),

spans as (
    select record_id, account_id, min(date) as first_day, max(date) as last_day
    from known
    group by all
),

days as (
    select
        record_id,
        account_id,
        unnest(generate_series(first_day, last_day, interval 1 day))::date as date
    from spans
)

select
    d.record_id,
    d.account_id,
    d.date,
    k.balance,
    k.available_balance,
    k.source,
    k.date < d.date as carried_forward
from days as d
asof left join known as k
    on d.record_id = k.record_id
   and d.account_id = k.account_id
   and d.date >= k.date;
