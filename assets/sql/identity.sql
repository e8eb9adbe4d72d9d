-- identity: one row per customer of a record, as the bank knows them (names, contacts, origin); the BVN, NIN, phones, emails and addresses masked, the BVN and NIN also as keyed hashes to join on.
-- The raw values stay sealed in the lake (`ledgerlake reveal` opens them, with the key).
create or replace view identity as
select * exclude (sealed)
from {lake:identity};
