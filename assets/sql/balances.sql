-- balances: the latest snapshot per account (the newest fetch; on a tie, the newest figure
-- the service stamped).
--
-- A lake table the warehouse's build keeps for the records whose snapshots moved
-- (assets/sql/derived/latest_balances.sql), read as it is: a record's or a customer's
-- balances are one lookup.
create or replace view balances as
select *
from {lake:latest_balances};
