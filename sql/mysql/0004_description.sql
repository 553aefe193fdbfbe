ALTER TABLE tiny_id_info ADD COLUMN IF NOT EXISTS description varchar(255) NOT NULL DEFAULT '';
