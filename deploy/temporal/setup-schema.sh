#!/bin/sh
# Temporal's schema on PostgreSQL, as Temporal's own compose files set it up (temporalio/admin-tools,
# temporal-sql-tool): the persistence and visibility databases, created when missing, migrated to
# the image's schema version. Idempotent: a second run finds both at their version.
set -eu
until nc -z -w 5 postgresql 5432; do echo "waiting for postgresql:5432"; sleep 2; done
tool="temporal-sql-tool --plugin postgres12 --ep postgresql -u ${POSTGRES_USER} -p 5432"
for db in temporal temporal_visibility; do
  $tool --db "$db" create || true  # there already: fine
done
$tool --db temporal setup-schema -v 0.0 || true  # the base version exists already: fine
$tool --db temporal update-schema -d /etc/temporal/schema/postgresql/v12/temporal/versioned
$tool --db temporal_visibility setup-schema -v 0.0 || true
$tool --db temporal_visibility update-schema -d /etc/temporal/schema/postgresql/v12/visibility/versioned
echo "Temporal schema ready"
