-- The inbox's own role and database beside Dagster's (compose's postgres service runs this once,
-- when its volume is new). Same password as Dagster's role here, for brevity; give it its own
-- in production.
\set pw `echo "$POSTGRES_PASSWORD"`
CREATE ROLE ledgerlake LOGIN PASSWORD :'pw';
CREATE DATABASE inbox OWNER ledgerlake;
