/*
 * output.h - probectl's one output convention: every command that prints data prints it as a
 * table for people (the default), CSV or JSON (`--format table|csv|json`, `--json`).
 *
 * A command's data is columns and rows of JSON cells. A table is aligned by libsmartcols
 * (util-linux's: display widths of any UTF-8, numbers to the right, the last column cut to a
 * terminal's width); `query`'s results keep the psql-like table of the seeds' documents
 * ("a | b", a rule, "(N rows)"). CSV is RFC 4180 (a field quoted when it holds a comma, a quote
 * or a line break; NULL empty). JSON is the API's document for the command. Reals are written
 * as the fewest digits that read back as the same double (20.9, not 20.899999999999999; all 17
 * where a value needs them), in JSON, tables and CSV alike.
 * Threads: the caller's. Memory: nothing kept. Failure: output_format_of() says why (exit 2).
 */
#ifndef PROBECTL_OUTPUT_H
#define PROBECTL_OUTPUT_H

#include <jansson.h>
#include <stdio.h>

enum output_format { OUTPUT_TABLE, OUTPUT_CSV, OUTPUT_JSON };

/* The getopt entries of the convention: --format F (case 'f') and --json (case 'j'). */
#define OUTPUT_LONGOPTS                                                                            \
    {"format", required_argument, NULL, 'f'},                                                      \
    {                                                                                              \
        "json", no_argument, NULL, 'j'                                                             \
    }

/* --format's @s into *@ret; -1 after saying on stderr what @cmd takes. */
int output_format_of(const char *s, const char *cmd, enum output_format *ret);
/* getopt's @c of OUTPUT_LONGOPTS ('f' with @arg, or 'j') into *@ret: -1 after saying why. */
int output_option(int c, const char *arg, const char *cmd, enum output_format *ret);

/* @rows (arrays of cells) under @cols (names) as @f's table or CSV, to stdout. */
void output_rows(enum output_format f, json_t *cols, json_t *rows);
/* The same as a psql-like table ("(N rows)" under it), for query results. */
void output_sql_table(json_t *cols, json_t *rows);
/* @doc as JSON (reals in the fewest digits that read back the same: jsontext.h) and a newline,
 * to stdout. */
void output_json(json_t *doc);

/* A report of several tables (memory, torch summary) as JSON or CSV: doc[@name] becomes
 * {"columns", "rows"} of a /v1/query @reply (the SQL's aliases name the columns). */
void output_section(json_t *doc, const char *name, json_t *reply);
/* @doc as @f: JSON whole; CSV its section @main alone (CSV holds one table). */
void output_report(enum output_format f, json_t *doc, const char *main);

/* A cell as text: strings as they are, reals as jsontext_real, NULL as @null. malloc'd. */
char *output_cell_text(json_t *v, const char *null);

#endif
