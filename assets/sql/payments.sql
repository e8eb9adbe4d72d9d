-- payments: one row per payment from PAYMENT and PAYMENT_RECURRING callbacks. `amount` and
-- `fee` are exact naira (decimal(18,2)), like every amount in the lake; `amount_kobo` is the
-- amount as the service sent it.
create or replace view payments as
select
    *,
    (amount * 100)::bigint as amount_kobo
from {lake:payments};
