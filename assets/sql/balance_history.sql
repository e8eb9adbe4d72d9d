-- balance_history: every balance snapshot a fetch took, oldest first per account.
-- `source` says what caused the fetch: callback, periodic, schedule or manual.
create or replace view balance_history as
select *
from {lake:balance_history};
