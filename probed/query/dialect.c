/* dialect.c - see dialect.h. */
#define _GNU_SOURCE
#include "query/dialect.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* ---- times: text, nanoseconds or seconds ---- */

enum time_kind { TIME_TEXT, TIME_NS, TIME_SECONDS };

#define NS_PAST 1e14 /* a number this large is nanoseconds (1e14 s is 3 million years) */

static int64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Floor division: times before 1970 still fall in the right second. */
static int64_t floor_div(int64_t a, int64_t b)
{
    return a / b - (a % b != 0 && (a < 0) != (b < 0));
}

/* 'YYYY-MM-DD[( |T)HH:MM[:SS[.fraction]]][Z|(+|-)HH[:MM]]', the whole text; UTC unless an
 * offset says otherwise. */
static bool parse_text(const char *s, int64_t *ret_ns)
{
    struct tm tm = {0};
    int y, mo, d, h = 0, mi = 0, sec = 0, n = 0;
    int64_t frac_ns = 0, offset_s = 0;

    if (sscanf(s, "%4d-%2d-%2d%n", &y, &mo, &d, &n) != 3 || n != 10)
        return false;
    s += n;
    if (*s == ' ' || *s == 'T') {
        if (sscanf(s + 1, "%2d:%2d%n", &h, &mi, &n) != 2 || n != 5)
            return false;
        s += 1 + n;
        if (*s == ':') {
            if (!isdigit((unsigned char)s[1]) || !isdigit((unsigned char)s[2]))
                return false;
            sec = (s[1] - '0') * 10 + (s[2] - '0');
            s += 3;
            if (*s == '.') {
                int64_t scale = 100000000;
                for (s++; isdigit((unsigned char)*s); s++, scale /= 10)
                    frac_ns += (*s - '0') * scale;
            }
        }
    }
    if (*s == 'Z') {
        s++;
    } else if (*s == '+' || *s == '-') {
        int oh, om = 0, sign = *s == '-' ? -1 : 1;
        if (sscanf(s + 1, "%2d%n", &oh, &n) != 1 || n != 2)
            return false;
        s += 1 + n;
        if (*s == ':' && sscanf(s + 1, "%2d%n", &om, &n) == 1 && n == 2)
            s += 1 + n;
        offset_s = sign * (oh * 3600 + om * 60);
    }
    if (*s || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60)
        return false;
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = sec;
    *ret_ns = ((int64_t)timegm(&tm) - offset_s) * 1000000000LL + frac_ns;
    return true;
}

/* The time @v holds, and its kind; false: NULL or not a time (the result is then NULL). */
static bool value_time(sqlite3_value *v, int64_t *ret_ns, enum time_kind *ret_kind)
{
    switch (sqlite3_value_type(v)) {
    case SQLITE_INTEGER:
    case SQLITE_FLOAT: {
        double d = sqlite3_value_double(v);
        if (!isfinite(d) || fabs(d) > 9.2e18)
            return false;
        if (fabs(d) >= NS_PAST) {
            *ret_ns = sqlite3_value_type(v) == SQLITE_INTEGER ? sqlite3_value_int64(v) : (int64_t)d;
            *ret_kind = TIME_NS;
        } else {
            *ret_ns = (int64_t)llround(d * 1e9);
            *ret_kind = TIME_SECONDS;
        }
        return true;
    }
    case SQLITE_TEXT:
        *ret_kind = TIME_TEXT;
        return parse_text((const char *)sqlite3_value_text(v), ret_ns);
    default:
        return false;
    }
}

/* As the views write `timestamp`: strftime('%Y-%m-%d %H:%M:%f', ..., 'unixepoch'). */
static void result_text_time(sqlite3_context *ctx, int64_t ns)
{
    int64_t secs = floor_div(ns, 1000000000LL);
    time_t t = (time_t)secs;
    struct tm tm;
    char buf[48];

    if (!gmtime_r(&t, &tm)) {
        sqlite3_result_null(ctx);
        return;
    }
    snprintf(buf, sizeof(buf), "%04d-%02d-%02d %02d:%02d:%02d.%03d", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
             (int)((ns - secs * 1000000000LL) / 1000000));
    sqlite3_result_text(ctx, buf, -1, SQLITE_TRANSIENT);
}

static void result_time(sqlite3_context *ctx, int64_t ns, enum time_kind kind)
{
    if (kind == TIME_TEXT)
        result_text_time(ctx, ns);
    else if (kind == TIME_NS)
        sqlite3_result_int64(ctx, ns);
    else
        sqlite3_result_double(ctx, (double)ns / 1e9);
}

static void fn_now(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc, (void)argv;
    result_text_time(ctx, now_ns());
}

/* now() + @argv[0] seconds: what `now() - interval '5 min'` becomes. */
static void fn_now_offset(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    double s = sqlite3_value_double(argv[0]);

    (void)argc;
    if (!isfinite(s) || fabs(s) > 1e10) {
        sqlite3_result_error(ctx, "now() +/- an interval: out of range", -1);
        return;
    }
    result_text_time(ctx, now_ns() + (int64_t)llround(s * 1e9));
}

/* The parts date_part() knows, and year() ... second() are. */
enum part { P_YEAR, P_MONTH, P_DAY, P_HOUR, P_MINUTE, P_SECOND, P_DOW, P_DOY, P_EPOCH, P_WEEK };

static const struct {
    const char *name;
    enum part part;
} PARTS[] = {
    {"year", P_YEAR},     {"years", P_YEAR},     {"month", P_MONTH},   {"months", P_MONTH},
    {"day", P_DAY},       {"days", P_DAY},       {"hour", P_HOUR},     {"hours", P_HOUR},
    {"minute", P_MINUTE}, {"minutes", P_MINUTE}, {"second", P_SECOND}, {"seconds", P_SECOND},
    {"dow", P_DOW},       {"doy", P_DOY},        {"epoch", P_EPOCH},   {"week", P_WEEK},
    {"weeks", P_WEEK},
};

static bool part_of(sqlite3_value *v, enum part *ret)
{
    const char *name = (const char *)sqlite3_value_text(v);

    for (size_t i = 0; name && i < sizeof(PARTS) / sizeof(PARTS[0]); i++)
        if (strcasecmp(name, PARTS[i].name) == 0)
            return *ret = PARTS[i].part, true;
    return false;
}

static void result_part(sqlite3_context *ctx, int64_t ns, enum part part)
{
    time_t t = (time_t)floor_div(ns, 1000000000LL);
    struct tm tm;

    if (part == P_EPOCH) {
        sqlite3_result_double(ctx, (double)ns / 1e9);
        return;
    }
    if (!gmtime_r(&t, &tm)) {
        sqlite3_result_null(ctx);
        return;
    }
    switch (part) {
    case P_YEAR:
        sqlite3_result_int(ctx, tm.tm_year + 1900);
        break;
    case P_MONTH:
        sqlite3_result_int(ctx, tm.tm_mon + 1);
        break;
    case P_DAY:
        sqlite3_result_int(ctx, tm.tm_mday);
        break;
    case P_HOUR:
        sqlite3_result_int(ctx, tm.tm_hour);
        break;
    case P_MINUTE:
        sqlite3_result_int(ctx, tm.tm_min);
        break;
    case P_SECOND:
        sqlite3_result_int(ctx, tm.tm_sec);
        break;
    case P_DOW:
        sqlite3_result_int(ctx, tm.tm_wday);
        break;
    case P_DOY:
        sqlite3_result_int(ctx, tm.tm_yday + 1);
        break;
    case P_WEEK: { /* ISO 8601 */
        char buf[8];
        strftime(buf, sizeof(buf), "%V", &tm);
        sqlite3_result_int(ctx, atoi(buf));
        break;
    }
    case P_EPOCH:
        break;
    }
}

/* year(t) ... second(t): the part is the function's user data. */
static void fn_part_of(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    enum time_kind kind;
    int64_t ns;

    (void)argc;
    if (value_time(argv[0], &ns, &kind))
        result_part(ctx, ns, (enum part)(intptr_t)sqlite3_user_data(ctx));
}

static void fn_date_part(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    enum time_kind kind;
    enum part part;
    int64_t ns;

    (void)argc;
    if (!part_of(argv[0], &part)) {
        sqlite3_result_error(ctx,
                             "date_part(): the first argument is one of 'year', 'month', 'day',"
                             " 'hour', 'minute', 'second', 'dow', 'doy', 'week', 'epoch'",
                             -1);
        return;
    }
    if (value_time(argv[1], &ns, &kind))
        result_part(ctx, ns, part);
}

static void fn_date_trunc(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    enum time_kind kind;
    enum part part;
    struct tm tm;
    int64_t ns;
    time_t t;

    (void)argc;
    if (!part_of(argv[0], &part) || part == P_DOW || part == P_DOY || part == P_EPOCH) {
        sqlite3_result_error(ctx,
                             "date_trunc(): the first argument is one of 'year', 'month', "
                             "'week', 'day', 'hour', 'minute', 'second'",
                             -1);
        return;
    }
    if (!value_time(argv[1], &ns, &kind))
        return;
    t = (time_t)floor_div(ns, 1000000000LL);
    if (!gmtime_r(&t, &tm)) {
        sqlite3_result_null(ctx);
        return;
    }
    switch (part) { /* each case clears what is below it, falling through */
    case P_YEAR:
        tm.tm_mon = 0;
        /* fall through */
    case P_MONTH:
        tm.tm_mday = 1;
        /* fall through */
    case P_DAY:
        tm.tm_hour = 0;
        /* fall through */
    case P_HOUR:
        tm.tm_min = 0;
        /* fall through */
    case P_MINUTE:
        tm.tm_sec = 0;
        /* fall through */
    default:
        break;
    }
    if (part == P_WEEK) { /* back to Monday, 00:00 */
        tm.tm_mday -= (tm.tm_wday + 6) % 7;
        tm.tm_hour = tm.tm_min = tm.tm_sec = 0;
    }
    result_time(ctx, (int64_t)timegm(&tm) * 1000000000LL, kind);
}

/* to_timestamp(seconds) as Postgres has it (nanoseconds too), or a text time made the views'. */
static void fn_to_timestamp(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    enum time_kind kind;
    int64_t ns;

    (void)argc;
    if (value_time(argv[0], &ns, &kind))
        result_text_time(ctx, ns);
    else if (sqlite3_value_type(argv[0]) == SQLITE_TEXT)
        sqlite3_result_error(ctx, "to_timestamp(): not a time ('YYYY-MM-DD HH:MM:SS', or seconds)",
                             -1);
}

int dialect_register(sqlite3 *db)
{
    static const struct {
        const char *name;
        enum part part;
    } parts[] = {{"year", P_YEAR}, {"month", P_MONTH},   {"day", P_DAY},
                 {"hour", P_HOUR}, {"minute", P_MINUTE}, {"second", P_SECOND}};
    const int pure = SQLITE_UTF8 | SQLITE_DETERMINISTIC;
    int rc = sqlite3_create_function(db, "now", 0, SQLITE_UTF8, NULL, fn_now, NULL, NULL);

    if (rc == SQLITE_OK)
        rc = sqlite3_create_function(db, "now_offset", 1, SQLITE_UTF8, NULL, fn_now_offset, NULL,
                                     NULL);
    for (size_t i = 0; rc == SQLITE_OK && i < sizeof(parts) / sizeof(parts[0]); i++)
        rc = sqlite3_create_function(db, parts[i].name, 1, pure, (void *)(intptr_t)parts[i].part,
                                     fn_part_of, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_create_function(db, "date_part", 2, pure, NULL, fn_date_part, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_create_function(db, "date_trunc", 2, pure, NULL, fn_date_trunc, NULL, NULL);
    if (rc == SQLITE_OK)
        rc =
            sqlite3_create_function(db, "to_timestamp", 1, pure, NULL, fn_to_timestamp, NULL, NULL);
    return rc;
}

/* ---- intervals ---- */

static const struct {
    const char *name;
    double seconds;
} UNITS[] = {
    {"microseconds", 1e-6},
    {"microsecond", 1e-6},
    {"usecs", 1e-6},
    {"usec", 1e-6},
    {"us", 1e-6},
    {"milliseconds", 1e-3},
    {"millisecond", 1e-3},
    {"msecs", 1e-3},
    {"msec", 1e-3},
    {"ms", 1e-3},
    {"seconds", 1},
    {"second", 1},
    {"secs", 1},
    {"sec", 1},
    {"s", 1},
    {"minutes", 60},
    {"minute", 60},
    {"mins", 60},
    {"min", 60},
    {"m", 60},
    {"hours", 3600},
    {"hour", 3600},
    {"hrs", 3600},
    {"hr", 3600},
    {"h", 3600},
    {"days", 86400},
    {"day", 86400},
    {"d", 86400},
    {"weeks", 604800},
    {"week", 604800},
    {"w", 604800},
};

static bool unit_seconds(const char *s, size_t len, double *ret)
{
    for (size_t i = 0; i < sizeof(UNITS) / sizeof(UNITS[0]); i++)
        if (strlen(UNITS[i].name) == len && strncasecmp(s, UNITS[i].name, len) == 0)
            return *ret = UNITS[i].seconds, true;
    return false;
}

int dialect_interval_seconds(const char *s, size_t len, double *ret)
{
    const char *end = s + len;
    double total = 0;
    int pairs = 0;

    for (;;) {
        char num[64], *num_end;
        const char *p;
        size_t n;
        double value, unit;

        while (s < end && isspace((unsigned char)*s))
            s++;
        if (s == end)
            break;
        for (p = s; p < end && (isdigit((unsigned char)*p) || *p == '.' || *p == '-' || *p == '+');)
            p++;
        n = (size_t)(p - s);
        if (n == 0 || n >= sizeof(num))
            return -EINVAL;
        memcpy(num, s, n);
        num[n] = '\0';
        value = strtod(num, &num_end);
        if (*num_end || !isfinite(value))
            return -EINVAL;
        while (p < end && isspace((unsigned char)*p))
            p++;
        for (s = p; p < end && isalpha((unsigned char)*p);)
            p++;
        if (!unit_seconds(s, (size_t)(p - s), &unit))
            return -EINVAL;
        total += value * unit;
        pairs++;
        s = p;
    }
    if (pairs == 0)
        return -EINVAL;
    *ret = total;
    return 0;
}

/* ---- SQLite's tokens ---- */

enum tok_kind { T_SPACE, T_STRING, T_IDENT, T_QIDENT, T_NUMBER, T_OP };

struct tok {
    enum tok_kind kind;
    size_t at, len;
};

static bool ident_char(unsigned char c)
{
    return isalnum(c) || c == '_' || c == '$' || c >= 0x80;
}

/* The token at @s (not at its end): as SQLite's tokenizer cuts it, for the kinds that matter
 * here; what it would refuse is one operator byte, left for SQLite to refuse. */
static void scan(const char *s, struct tok *t)
{
    const char *p = s;

    if (isspace((unsigned char)*p)) {
        while (isspace((unsigned char)*p))
            p++;
        t->kind = T_SPACE;
    } else if (p[0] == '-' && p[1] == '-') {
        while (*p && *p != '\n')
            p++;
        t->kind = T_SPACE;
    } else if (p[0] == '/' && p[1] == '*') {
        const char *e = strstr(p + 2, "*/");
        p = e ? e + 2 : p + strlen(p);
        t->kind = T_SPACE;
    } else if (*p == '\'' || ((*p == 'x' || *p == 'X') && p[1] == '\'')) {
        bool blob = *p != '\'';
        p += blob ? 2 : 1;
        while (*p && !(*p == '\'' && p[1] != '\''))
            p += *p == '\'' ? 2 : 1;
        if (*p)
            p++;
        t->kind = blob ? T_OP : T_STRING; /* a blob is no interval: never rewritten */
    } else if (*p == '"' || *p == '`' || *p == '[') {
        char close = *p == '[' ? ']' : *p;
        p++;
        while (*p && !(*p == close && (close == ']' || p[1] != close)))
            p += *p == close ? 2 : 1;
        if (*p)
            p++;
        t->kind = T_QIDENT;
    } else if (isdigit((unsigned char)*p) || (*p == '.' && isdigit((unsigned char)p[1]))) {
        if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
            p += 2;
            while (isxdigit((unsigned char)*p))
                p++;
        } else {
            while (isdigit((unsigned char)*p) || *p == '_')
                p++;
            if (*p == '.')
                for (p++; isdigit((unsigned char)*p) || *p == '_';)
                    p++;
            if ((*p == 'e' || *p == 'E') &&
                (isdigit((unsigned char)p[1]) ||
                 ((p[1] == '+' || p[1] == '-') && isdigit((unsigned char)p[2]))))
                for (p += 2; isdigit((unsigned char)*p);)
                    p++;
        }
        while (ident_char((unsigned char)*p)) /* 12abc: one token, SQLite's error */
            p++;
        t->kind = T_NUMBER;
    } else if (ident_char((unsigned char)*p)) {
        while (ident_char((unsigned char)*p))
            p++;
        t->kind = T_IDENT;
    } else {
        static const char *const two[] = {"||", "<=", ">=", "==", "!=", "<>", "<<", ">>", "->"};
        p++;
        for (size_t i = 0; i < sizeof(two) / sizeof(two[0]); i++)
            if (s[0] == two[i][0] && s[1] == two[i][1])
                p = s + 2;
        if (s[0] == '-' && s[1] == '>' && s[2] == '>')
            p = s + 3;
        t->kind = T_OP;
    }
    t->at = 0;
    t->len = (size_t)(p - s);
}

struct toks {
    const char *sql;
    struct tok *v; /* the significant ones (no space, no comment) */
    size_t n;
};

static bool is(const struct toks *k, size_t i, enum tok_kind kind, const char *text)
{
    const struct tok *t;

    if (i >= k->n)
        return false;
    t = &k->v[i];
    return t->kind == kind &&
           (!text || (strlen(text) == t->len && strncasecmp(k->sql + t->at, text, t->len) == 0));
}

static bool is_comparison(const struct toks *k, size_t i)
{
    static const char *const ops[] = {"<", "<=", ">", ">=", "=", "==", "!=", "<>"};

    for (size_t j = 0; j < sizeof(ops) / sizeof(ops[0]); j++)
        if (is(k, i, T_OP, ops[j]))
            return true;
    return false;
}

/* A column whose name ends in _ns (quoted or not): its times are nanoseconds. */
static bool ns_column(const struct toks *k, size_t i)
{
    const struct tok *t;
    size_t len;
    const char *s;

    if (i >= k->n || (k->v[i].kind != T_IDENT && k->v[i].kind != T_QIDENT))
        return false;
    t = &k->v[i];
    s = k->sql + t->at;
    len = t->len;
    if (t->kind == T_QIDENT && len >= 2) {
        s++;
        len -= 2;
    }
    return len >= 3 && strncasecmp(s + len - 3, "_ns", 3) == 0;
}

/* An interval literal at @i ('interval' 'N unit', or 'interval' 'N' unit): its seconds and
 * the token after it; false: none there. */
static bool interval_at(const struct toks *k, size_t i, double *ret_s, size_t *ret_next)
{
    const struct tok *str;
    double unit;

    if (!is(k, i, T_IDENT, "interval") || !is(k, i + 1, T_STRING, NULL))
        return false;
    str = &k->v[i + 1];
    if (str->len < 2 || k->sql[str->at + str->len - 1] != '\'')
        return false; /* unterminated: SQLite's error */
    if (dialect_interval_seconds(k->sql + str->at + 1, str->len - 2, ret_s) == 0) {
        *ret_next = i + 2;
        return true;
    }
    /* INTERVAL '5' MINUTE */
    if (i + 2 < k->n && k->v[i + 2].kind == T_IDENT &&
        unit_seconds(k->sql + k->v[i + 2].at, k->v[i + 2].len, &unit)) {
        char num[64], *end;
        size_t n = str->len - 2;
        if (n == 0 || n >= sizeof(num))
            return false;
        memcpy(num, k->sql + str->at + 1, n);
        num[n] = '\0';
        double v = strtod(num, &end);
        if (*end || !isfinite(v))
            return false;
        *ret_s = v * unit;
        *ret_next = i + 3;
        return true;
    }
    return false;
}

/* now() at @i, with what is added or taken (intervals, numbers of seconds): its offset in
 * seconds and the token after it; false: no now() there. */
static bool now_at(const struct toks *k, size_t i, double *ret_s, size_t *ret_next, bool *ret_ops)
{
    size_t j = i + 3;
    double total = 0;

    if (!is(k, i, T_IDENT, "now") || !is(k, i + 1, T_OP, "(") || !is(k, i + 2, T_OP, ")"))
        return false;
    *ret_ops = false;
    while (is(k, j, T_OP, "+") || is(k, j, T_OP, "-")) {
        double sign = is(k, j, T_OP, "-") ? -1 : 1, s;
        size_t next;
        if (interval_at(k, j + 1, &s, &next)) {
            total += sign * s;
            j = next;
        } else if (is(k, j + 1, T_NUMBER, NULL) && !is(k, j + 2, T_OP, "*") &&
                   !is(k, j + 2, T_OP, "/") && !is(k, j + 2, T_OP, "%")) {
            char num[64], *end;
            const struct tok *t = &k->v[j + 1];
            if (t->len >= sizeof(num))
                break;
            memcpy(num, k->sql + t->at, t->len);
            num[t->len] = '\0';
            s = strtod(num, &end);
            if (*end || !isfinite(s))
                break;
            total += sign * s;
            j += 2;
        } else {
            break;
        }
        *ret_ops = true;
    }
    *ret_s = total;
    *ret_next = j;
    return true;
}

/* Appends @n bytes to the growing output; false: no memory. */
static bool put(char **buf, size_t *len, size_t *cap, const char *s, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t c = (*len + n + 1) * 2;
        char *p = realloc(*buf, c);
        if (!p)
            return false;
        *buf = p;
        *cap = c;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = '\0';
    return true;
}

void dialect_swaps_free(struct dialect_swaps *swaps)
{
    for (size_t i = 0; swaps && i < swaps->n; i++) {
        free(swaps->v[i].made);
        free(swaps->v[i].written);
    }
    if (swaps) {
        free(swaps->v);
        *swaps = (struct dialect_swaps){0};
    }
}

static bool add_swap(struct dialect_swaps *swaps, const char *made, const char *written,
                     size_t written_len)
{
    struct dialect_swap *v = realloc(swaps->v, (swaps->n + 1) * sizeof(*v));

    if (!v)
        return false;
    swaps->v = v;
    v[swaps->n] = (struct dialect_swap){strdup(made), strndup(written, written_len)};
    if (!v[swaps->n].made || !v[swaps->n].written) {
        free(v[swaps->n].made);
        free(v[swaps->n].written);
        return false;
    }
    swaps->n++;
    return true;
}

char *dialect_column_name(const struct dialect_swaps *swaps, const char *name)
{
    char *out = NULL;
    size_t len = 0, cap = 0;
    const char *p = name;
    bool changed = false;

    while (swaps && p && *p) {
        size_t i;
        for (i = 0; i < swaps->n; i++)
            if (strncmp(p, swaps->v[i].made, strlen(swaps->v[i].made)) == 0)
                break;
        if (i < swaps->n) {
            if (!put(&out, &len, &cap, swaps->v[i].written, strlen(swaps->v[i].written)))
                goto fail;
            p += strlen(swaps->v[i].made);
            changed = true;
        } else if (!put(&out, &len, &cap, p++, 1)) {
            goto fail;
        }
    }
    if (changed)
        return out;
fail:
    free(out);
    return NULL;
}

int dialect_rewrite(const char *sql, char **ret, struct dialect_swaps *swaps)
{
    struct toks k = {.sql = sql};
    size_t cap = 0, copied = 0, len = 0, out_cap = 0;
    char *out = NULL;
    bool changed = false, ok = true;

    *ret = NULL;
    for (size_t at = 0; sql[at];) {
        struct tok t;
        scan(sql + at, &t);
        t.at = at;
        at += t.len;
        if (t.kind == T_SPACE)
            continue;
        if (k.n == cap) {
            size_t c = cap ? 2 * cap : 64;
            struct tok *v = realloc(k.v, c * sizeof(*v));
            if (!v) {
                free(k.v);
                return -ENOMEM;
            }
            k.v = v;
            cap = c;
        }
        k.v[k.n++] = t;
    }
    for (size_t i = 0; ok && i < k.n;) {
        char repl[128];
        size_t next;
        double s;
        bool ops;

        if (now_at(&k, i, &s, &next, &ops)) {
            /* beside a column in nanoseconds, either side of a comparison: nanoseconds */
            size_t after = next + 1; /* past s.t. qualifiers: s."first_ns" */
            while ((is(&k, after, T_IDENT, NULL) || is(&k, after, T_QIDENT, NULL)) &&
                   is(&k, after + 1, T_OP, "."))
                after += 2;
            bool ns = (i >= 2 && is_comparison(&k, i - 1) && ns_column(&k, i - 2)) ||
                      (is_comparison(&k, next) && ns_column(&k, after));
            if (ns)
                snprintf(repl, sizeof(repl), "(now_ns() + %lld)", (long long)llround(s * 1e9));
            else if (ops)
                snprintf(repl, sizeof(repl), "now_offset(%.17g)", s);
            else
                repl[0] = '\0'; /* now() itself: the function */
        } else if (interval_at(&k, i, &s, &next)) {
            snprintf(repl, sizeof(repl), "(%.17g)", s);
        } else if (is(&k, i, T_IDENT, "extract") && is(&k, i + 1, T_OP, "(") &&
                   is(&k, i + 2, T_IDENT, NULL) && is(&k, i + 3, T_IDENT, "from")) {
            /* EXTRACT(hour FROM t) -> date_part('hour', t */
            const struct tok *f = &k.v[i + 2];
            if (f->len > 32) {
                i++;
                continue;
            }
            snprintf(repl, sizeof(repl), "date_part('%.*s',", (int)f->len, sql + f->at);
            next = i + 4;
        } else {
            i++;
            continue;
        }
        if (repl[0]) {
            const struct tok *last = &k.v[next - 1];
            ok = put(&out, &len, &out_cap, sql + copied, k.v[i].at - copied) &&
                 put(&out, &len, &out_cap, repl, strlen(repl)) &&
                 (!swaps ||
                  add_swap(swaps, repl, sql + k.v[i].at, last->at + last->len - k.v[i].at));
            copied = last->at + last->len;
            changed = true;
        }
        i = next;
    }
    if (ok && changed)
        ok = put(&out, &len, &out_cap, sql + copied, strlen(sql + copied));
    free(k.v);
    if (!ok) {
        free(out);
        dialect_swaps_free(swaps);
        return -ENOMEM;
    }
    if (!changed) {
        free(out);
        return 0;
    }
    *ret = out;
    return 1;
}
