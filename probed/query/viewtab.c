/* viewtab.c - see viewtab.h. */
#define _GNU_SOURCE
#include "query/viewtab.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct view_vtab {
    sqlite3_vtab base;
    sqlite3 *db;
    char select[128]; /* SELECT * FROM temp."<view>" */
};

struct view_cursor {
    sqlite3_vtab_cursor base;
    sqlite3_stmt *q;
    sqlite3_int64 rowid;
    int eof;
};

/* A view name is a plain identifier (it comes from our own CREATE VIRTUAL TABLE). */
static int plain_name(const char *s)
{
    if (!*s || strlen(s) > 64)
        return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '_')
            return 0;
    return 1;
}

/* "CREATE TABLE x(a, b, ...)" with the view's column names. */
static char *declaration(sqlite3_stmt *q)
{
    size_t cap = 32, len;
    char *sql = malloc(cap);

    if (!sql)
        return NULL;
    len = (size_t)snprintf(sql, cap, "CREATE TABLE x(");
    for (int i = 0; i < sqlite3_column_count(q); i++) {
        const char *name = sqlite3_column_name(q, i);
        size_t need = len + strlen(name) + 8;
        if (need > cap) {
            char *bigger = realloc(sql, cap = need * 2);
            if (!bigger) {
                free(sql);
                return NULL;
            }
            sql = bigger;
        }
        len += (size_t)snprintf(sql + len, cap - len, "%s\"%s\"", i ? ", " : "", name);
    }
    snprintf(sql + len, cap - len, ")");
    return sql;
}

static int view_connect(sqlite3 *db, void *aux, int argc, const char *const *argv,
                        sqlite3_vtab **ret, char **errmsg)
{
    struct view_vtab *v;
    sqlite3_stmt *q = NULL;
    char *decl = NULL;
    int rc;

    (void)aux;
    if (argc != 4 || !plain_name(argv[3])) {
        *errmsg = sqlite3_mprintf("probed_view: expected one view name");
        return SQLITE_ERROR;
    }
    v = calloc(1, sizeof(*v));
    if (!v)
        return SQLITE_NOMEM;
    v->db = db;
    snprintf(v->select, sizeof(v->select), "SELECT * FROM temp.\"%s\"", argv[3]);
    rc = sqlite3_prepare_v2(db, v->select, -1, &q, NULL);
    if (rc == SQLITE_OK)
        decl = declaration(q);
    if (rc == SQLITE_OK)
        rc = decl ? sqlite3_declare_vtab(db, decl) : SQLITE_NOMEM;
    if (rc != SQLITE_OK)
        *errmsg = sqlite3_mprintf("probed_view %s: %s", argv[3], sqlite3_errmsg(db));
    sqlite3_finalize(q);
    free(decl);
    if (rc != SQLITE_OK) {
        free(v);
        return rc;
    }
    *ret = &v->base;
    return SQLITE_OK;
}

static int view_disconnect(sqlite3_vtab *vt)
{
    free(vt);
    return SQLITE_OK;
}

static int view_best_index(sqlite3_vtab *vt, sqlite3_index_info *info)
{
    (void)vt;
    info->estimatedCost = 1e6;
    info->estimatedRows = 100000;
    return SQLITE_OK;
}

static int view_open(sqlite3_vtab *vt, sqlite3_vtab_cursor **ret)
{
    struct view_vtab *v = (struct view_vtab *)vt;
    struct view_cursor *c = calloc(1, sizeof(*c));

    if (!c)
        return SQLITE_NOMEM;
    if (sqlite3_prepare_v2(v->db, v->select, -1, &c->q, NULL) != SQLITE_OK) {
        sqlite3_free(vt->zErrMsg);
        vt->zErrMsg = sqlite3_mprintf("%s", sqlite3_errmsg(v->db));
        free(c);
        return SQLITE_ERROR;
    }
    *ret = &c->base;
    return SQLITE_OK;
}

static int view_close(sqlite3_vtab_cursor *cur)
{
    struct view_cursor *c = (struct view_cursor *)cur;

    sqlite3_finalize(c->q);
    free(c);
    return SQLITE_OK;
}

static int view_next(sqlite3_vtab_cursor *cur)
{
    struct view_cursor *c = (struct view_cursor *)cur;
    int rc = sqlite3_step(c->q);

    c->rowid++;
    c->eof = rc != SQLITE_ROW;
    if (rc == SQLITE_ROW || rc == SQLITE_DONE)
        return SQLITE_OK;
    sqlite3_free(cur->pVtab->zErrMsg);
    cur->pVtab->zErrMsg = sqlite3_mprintf("%s", sqlite3_errmsg(sqlite3_db_handle(c->q)));
    return rc;
}

static int view_filter(sqlite3_vtab_cursor *cur, int idx, const char *idx_str, int argc,
                       sqlite3_value **argv)
{
    struct view_cursor *c = (struct view_cursor *)cur;

    (void)idx, (void)idx_str, (void)argc, (void)argv;
    sqlite3_reset(c->q);
    c->rowid = 0;
    return view_next(cur);
}

static int view_eof(sqlite3_vtab_cursor *cur)
{
    return ((struct view_cursor *)cur)->eof;
}

static int view_column(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int i)
{
    sqlite3_result_value(ctx, sqlite3_column_value(((struct view_cursor *)cur)->q, i));
    return SQLITE_OK;
}

static int view_rowid(sqlite3_vtab_cursor *cur, sqlite3_int64 *ret)
{
    *ret = ((struct view_cursor *)cur)->rowid;
    return SQLITE_OK;
}

static const sqlite3_module view_module = {
    .iVersion = 1,
    .xCreate = view_connect,
    .xConnect = view_connect,
    .xBestIndex = view_best_index,
    .xDisconnect = view_disconnect,
    .xDestroy = view_disconnect,
    .xOpen = view_open,
    .xClose = view_close,
    .xFilter = view_filter,
    .xNext = view_next,
    .xEof = view_eof,
    .xColumn = view_column,
    .xRowid = view_rowid,
};

int viewtab_register(sqlite3 *db)
{
    return sqlite3_create_module(db, "probed_view", &view_module, NULL);
}
