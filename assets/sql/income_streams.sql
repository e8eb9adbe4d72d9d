-- income_streams: one row per income stream the service found (salary, recurrent credit...).
create or replace view income_streams as
select *
from {lake:income_streams};
