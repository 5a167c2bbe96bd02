/*
 * schema.h - the schema files (schema/NNNN_name.sql, views.sql), built into the daemon.
 *
 * File N (1-based, in name order) brings a database from PRAGMA user_version N-1 to N.
 */
#ifndef PROBED_SCHEMA_H
#define PROBED_SCHEMA_H

struct schema_file {
    const char *name; /* "0001_init.sql" */
    const char *sql;
};

extern const struct schema_file schema_files[];
extern const unsigned schema_n_files;
extern const char *const schema_views; /* views.sql: TEMP views of a query connection */

#endif
