"""Everything that touches PostgreSQL: queries, migrations, connections, the embedded server."""
