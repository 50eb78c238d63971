#!/bin/bash
# Creates the replication user the Airflow connection `binlog_default` logs in with.
#
# Run once by the mysql image's entrypoint, on the first start with an empty data directory (files in
# /docker-entrypoint-initdb.d are processed in name order, against a temporary server reachable only
# through its socket). A .sh file rather than a .sql file because the password comes from the
# environment (CDC_USER / CDC_PASSWORD, set in docker-compose.yaml); the entrypoint sources this
# file or executes it, depending on its mode bits, and both work.
#
# Grants: REPLICATION SLAVE to stream the binlog, REPLICATION CLIENT for SHOW BINARY LOGS and the
# server's binlog settings, SELECT for table metadata and snapshots. Nothing else.

cdc_user="${CDC_USER:-cdc}"
cdc_password="${CDC_PASSWORD:?CDC_PASSWORD must be set for the mysql service}"
# SQL string literals: double any single quote.
cdc_user_sql="${cdc_user//\'/\'\'}"
cdc_password_sql="${cdc_password//\'/\'\'}"

mysql --protocol=socket -uroot --password="${MYSQL_ROOT_PASSWORD}" <<SQL
CREATE USER IF NOT EXISTS '${cdc_user_sql}'@'%' IDENTIFIED BY '${cdc_password_sql}';
GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO '${cdc_user_sql}'@'%';
SQL
