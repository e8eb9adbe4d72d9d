-- identity: one row per customer of a record, as the bank knows them (BVN, names, contacts).
create or replace view identity as
select *
from {lake:identity};
