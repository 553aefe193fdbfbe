-- segmint schema for embedded (SQLite) databases, version 3: the token lifecycle, as
-- on PostgreSQL (sql/postgres/0003_token_lifecycle.sql). Times are UTC text in
-- create_time's format ('YYYY-MM-DD HH:MM:SS'), which sorts as the times do.
ALTER TABLE tiny_id_token ADD COLUMN expire_time TEXT;
ALTER TABLE tiny_id_token ADD COLUMN revoke_time TEXT;
ALTER TABLE tiny_id_token ADD COLUMN last_used_time TEXT;
