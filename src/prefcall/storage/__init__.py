"""The prefcall database: one SQLite file, numbered migrations for every table, and the stores over it
(profiles, catalogues, demonstrations). Persistence only; no strategy logic."""
