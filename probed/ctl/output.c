/* output.c - see output.h. */
#define _GNU_SOURCE
#include "ctl/output.h"

#include <ctype.h>
#include <libsmartcols.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/jsontext.h"

int output_format_of(const char *s, const char *cmd, enum output_format *ret)
{
    if (strcmp(s, "table") == 0)
        *ret = OUTPUT_TABLE;
    else if (strcmp(s, "csv") == 0)
        *ret = OUTPUT_CSV;
    else if (strcmp(s, "json") == 0)
        *ret = OUTPUT_JSON;
    else {
        fprintf(stderr, "probectl %s: --format takes table, csv or json, not '%s'\n", cmd, s);
        return -1;
    }
    return 0;
}

int output_option(int c, const char *arg, const char *cmd, enum output_format *ret)
{
    if (c == 'j') {
        *ret = OUTPUT_JSON;
        return 0;
    }
    return output_format_of(arg, cmd, ret);
}

char *output_cell_text(json_t *v, const char *null)
{
    char *s = NULL;

    if (json_is_string(v))
        return strdup(json_string_value(v));
    if (!v || json_is_null(v))
        return strdup(null);
    if (json_is_integer(v) && asprintf(&s, "%lld", (long long)json_integer_value(v)) >= 0)
        return s;
    if (json_is_real(v)) {
        char buf[40];

        jsontext_real(json_real_value(v), buf, sizeof(buf)); /* 20.9, not 20.899999999999999 */
        return strdup(buf);
    }
    if (json_is_boolean(v))
        return strdup(json_is_true(v) ? "true" : "false");
    return json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
}

void output_json(json_t *doc)
{
    char *text = jsontext_dumps(doc, JSON_INDENT(2) | JSON_ENSURE_ASCII);

    if (text)
        puts(text);
    free(text);
}

static void csv_field(const char *s)
{
    if (!strpbrk(s, ",\"\n\r")) {
        fputs(s, stdout);
        return;
    }
    putchar('"');
    for (; *s; s++) {
        if (*s == '"')
            putchar('"');
        putchar(*s);
    }
    putchar('"');
}

static void print_csv(json_t *cols, json_t *rows)
{
    size_t i, k;
    json_t *row, *c;

    json_array_foreach(cols, k, c)
    {
        if (k)
            putchar(',');
        csv_field(json_string_value(c) ?: "");
    }
    putchar('\n');
    json_array_foreach(rows, i, row)
    {
        json_array_foreach(row, k, c)
        {
            char *t = output_cell_text(c, "");

            if (k)
                putchar(',');
            csv_field(t ? t : "");
            free(t);
        }
        putchar('\n');
    }
}

/* Whether every cell of column @k that is not NULL is a number. */
static bool numeric_column(json_t *rows, size_t k)
{
    size_t i;
    json_t *row;
    bool any = false;

    json_array_foreach(rows, i, row)
    {
        json_t *v = json_array_get(row, k);

        if (json_is_null(v) || !v)
            continue;
        if (!json_is_number(v))
            return false;
        any = true;
    }
    return any;
}

void output_rows(enum output_format f, json_t *cols, json_t *rows)
{
    size_t ncol = json_array_size(cols), i, k;
    struct libscols_table *tb;
    json_t *row;

    if (f == OUTPUT_CSV) {
        print_csv(cols, rows);
        return;
    }
    if (f == OUTPUT_JSON) { /* a command without a document of its own: objects by column */
        json_t *out = json_array();

        json_array_foreach(rows, i, row)
        {
            json_t *o = json_object();

            for (k = 0; k < ncol; k++)
                json_object_set(o, json_string_value(json_array_get(cols, k)),
                                json_array_get(row, k) ?: json_null());
            json_array_append_new(out, o);
        }
        output_json(out);
        json_decref(out);
        return;
    }
    if (json_array_size(rows) == 0) { /* libsmartcols prints nothing of an empty table */
        for (k = 0; k < ncol; k++)
            printf("%s%s", k ? " " : "", json_string_value(json_array_get(cols, k)) ?: "");
        putchar('\n');
        return;
    }
    if (!(tb = scols_new_table()))
        return;
    for (k = 0; k < ncol; k++) {
        int flags = numeric_column(rows, k) ? SCOLS_FL_RIGHT : 0;

        /* the last column (a command line, a note) is cut at a terminal's edge */
        if (k + 1 == ncol && !(flags & SCOLS_FL_RIGHT))
            flags |= SCOLS_FL_TRUNC;
        scols_table_new_column(tb, json_string_value(json_array_get(cols, k)) ?: "", 0, flags);
    }
    json_array_foreach(rows, i, row)
    {
        struct libscols_line *ln = scols_table_new_line(tb, NULL);

        for (k = 0; ln && k < ncol; k++) {
            char *t = output_cell_text(json_array_get(row, k), "-");

            if (t)
                scols_line_refer_data(ln, k, t); /* the table frees it */
        }
    }
    scols_print_table(tb);
    scols_unref_table(tb);
}

void output_section(json_t *doc, const char *name, json_t *reply)
{
    json_object_set_new(doc, name,
                        json_pack("{s:O, s:O}", "columns",
                                  json_object_get(reply, "columns") ?: json_null(), "rows",
                                  json_object_get(reply, "rows") ?: json_null()));
}

void output_report(enum output_format f, json_t *doc, const char *main)
{
    json_t *section = json_object_get(doc, main);

    if (f == OUTPUT_JSON)
        output_json(doc);
    else if (section)
        output_rows(f, json_object_get(section, "columns"), json_object_get(section, "rows"));
}

static size_t text_width(const char *s)
{
    size_t n = 0;

    for (; *s; s++)
        n += ((unsigned char)*s & 0xc0) != 0x80;
    return n;
}

void output_sql_table(json_t *cols, json_t *rows)
{
    size_t ncol = json_array_size(cols), i, k;
    size_t *width = calloc(ncol ? ncol : 1, sizeof(*width));
    json_t *row;

    if (!width)
        return;
    for (k = 0; k < ncol; k++)
        width[k] = text_width(json_string_value(json_array_get(cols, k)) ?: "");
    json_array_foreach(rows, i, row)
    {
        for (k = 0; k < ncol; k++) {
            char *t = output_cell_text(json_array_get(row, k), "NULL");

            if (t && text_width(t) > width[k])
                width[k] = text_width(t);
            free(t);
        }
    }
    for (int pass = 0; pass < 2; pass++) {
        for (k = 0; k < ncol; k++) {
            const char *name = json_string_value(json_array_get(cols, k)) ?: "";

            if (pass == 0)
                printf("%s%s%*s", k ? " | " : "", name, (int)(width[k] - text_width(name)), "");
            else
                for (size_t d = 0; d < width[k] + (k ? 3 : 0); d++)
                    fputs(k && d == 1 ? "+" : "-", stdout);
        }
        printf("\n");
    }
    json_array_foreach(rows, i, row)
    {
        for (k = 0; k < ncol; k++) {
            json_t *v = json_array_get(row, k);
            char *t = output_cell_text(v, "NULL");
            int pad = (int)(width[k] - text_width(t ? t : ""));

            if (json_is_number(v)) /* numbers right-aligned, as in the seeds' tables */
                printf("%s%*s%s", k ? " | " : "", pad, "", t ? t : "");
            else
                printf("%s%s%*s", k ? " | " : "", t ? t : "", k + 1 < ncol ? pad : 0, "");
            free(t);
        }
        printf("\n");
    }
    printf("(%zu row%s)\n", json_array_size(rows), json_array_size(rows) == 1 ? "" : "s");
    free(width);
}
