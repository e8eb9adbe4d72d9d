-- daily_balances: one row per account per day (the customer's day: LEDGERLAKE_TIMEZONE,
-- Africa/Lagos by default), from the account's first known day to its last, each day holding
-- the balance at the end of that day, exact (decimal naira).
--
-- A lake table the warehouse's build keeps for the records whose lines or periodic history
-- moved (assets/sql/derived/daily_balances.sql says where each figure comes from), read as it
-- is: a record's days are one lookup.
create or replace view daily_balances as
select *
from {lake:daily_balances};
