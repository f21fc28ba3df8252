"""The PostgreSQL backend (optional extra ``postgres``): psycopg 3 and psycopg_pool."""
