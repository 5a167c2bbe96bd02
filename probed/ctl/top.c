/* top.c - see top.h. */
#define _GNU_SOURCE
#include "ctl/top.h"

#include <curses.h>
#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl/client.h"
#include "ctl/output.h"

struct top_view {
    const char *socket;
    int pid;
    int window_s, rows;
    bool by_total; /* sorted by %Total, else by %Own */
    bool idle;     /* samples of threads off the CPU too */
    bool gil;      /* only samples holding the GIL */
};

/* One refresh: the query's reply (rows own, total, func, file, all_n, gil_n), or NULL after
 * saying why. */
static json_t *top_read(const struct top_view *v)
{
    char sql[2048];
    json_t *body, *reply;

    /* One statement, so one snapshot: the totals and the rows count the same samples (two
     * queries a flush apart gave shares over 100 %). By total, callers before the functions
     * they call when their totals tie (the farther from the leaf first): top-down, as the
     * stack reads. */
    snprintf(
        sql, sizeof(sql),
        "WITH win AS (SELECT stack_id, state FROM samples WHERE stack_id <> 0%s%s AND"
        " ts_ns > ago('%ds') AND target_id IN (SELECT id FROM targets WHERE pid = %d)),"
        " tot AS (SELECT count(*) AS all_n, sum(state >> 1 & 1) AS gil_n FROM win),"
        " per_stack AS (SELECT stack_id, count(*) AS n FROM win GROUP BY stack_id),"
        " funcs AS (SELECT stack_id, func, file, min(depth) = 0 AS is_self, max(depth) AS d"
        " FROM stacks"
        " WHERE stack_id IN (SELECT stack_id FROM per_stack) GROUP BY stack_id, func, file),"
        " top AS (SELECT sum(CASE WHEN is_self THEN n ELSE 0 END) AS own, sum(n) AS total,"
        " func, file, max(d) AS d FROM funcs JOIN per_stack USING (stack_id) GROUP BY func, file"
        " ORDER BY %s LIMIT %d)"
        " SELECT own, total, func, file, all_n, gil_n FROM tot LEFT JOIN top",
        v->idle ? "" : " AND state & 1", v->gil ? " AND state & 2" : "", v->window_s, v->pid,
        v->by_total ? "total DESC, own ASC, d DESC" : "own DESC, total DESC", v->rows);
    body = json_pack("{s:s, s:i}", "sql", sql, "pid", v->pid);
    reply = client_request(v->socket, "POST", "/v1/query", body);
    json_decref(body);
    return reply;
}

static long long all_of(json_t *reply, size_t col)
{
    return json_integer_value(
        json_array_get(json_array_get(json_object_get(reply, "rows"), 0), col));
}

static double pct(long long n, long long all)
{
    return all ? 100.0 * (double)n / (double)all : 0.0;
}

/* The heading: what the shares are of. */
static void heading(const struct top_view *v, json_t *reply, char *buf, size_t len)
{
    long long all = all_of(reply, 4), gil = all_of(reply, 5);

    snprintf(buf, len,
             "probectl top: pid %d, %lld samples%s%s in the last %d s, GIL held in %.1f%%", v->pid,
             all, v->idle ? "" : " on CPU", v->gil ? " holding the GIL" : "", v->window_s,
             pct(gil, all));
}

/* --once (or not a terminal): one table, or CSV or JSON of the same rows. */
static int top_print(const struct top_view *v, enum output_format format)
{
    json_t *reply = top_read(v), *row, *cols, *rows;
    long long all;
    char head[256];
    size_t i;

    if (!reply)
        return 1;
    all = all_of(reply, 4);
    rows = json_array();
    json_array_foreach(json_object_get(reply, "rows"), i, row)
    {
        if (!json_is_string(json_array_get(row, 2)))
            continue; /* no sample in the window: the totals' row alone */
        json_array_append_new(rows, json_pack("[f, f, I, I, O, O]", pct(client_int(row, 0), all),
                                              pct(client_int(row, 1), all),
                                              (json_int_t)client_int(row, 0),
                                              (json_int_t)client_int(row, 1),
                                              json_array_get(row, 2), json_array_get(row, 3)));
    }
    if (format == OUTPUT_TABLE) {
        heading(v, reply, head, sizeof(head));
        printf("%s\n\n%7s %7s  %s\n", head, "%Own", "%Total", "Function (file)");
        json_array_foreach(rows, i, row) printf(
            "%6.1f%% %6.1f%%  %s (%s)\n", client_num(row, 0), client_num(row, 1),
            json_string_value(json_array_get(row, 4)), json_string_value(json_array_get(row, 5)));
    } else {
        cols = json_pack("[s, s, s, s, s, s]", "own_pct", "total_pct", "own", "total", "function",
                         "file");
        output_rows(format, cols, rows);
        json_decref(cols);
    }
    fflush(stdout);
    json_decref(rows);
    json_decref(reply);
    return 0;
}

/* One screen of the interactive view. */
static void draw(const struct top_view *v, json_t *reply, bool paused)
{
    long long all = all_of(reply, 4);
    char head[256];
    json_t *row;
    size_t i;
    int y = 3;

    erase();
    heading(v, reply, head, sizeof(head));
    mvaddnstr(0, 0, head, COLS);
    mvprintw(1, 0, "sorted by %s%s", v->by_total ? "%Total" : "%Own",
             paused ? "   PAUSED (p resumes)" : "");
    attron(A_REVERSE);
    mvprintw(2, 0, "%7s %7s  %-*s", "%Own", "%Total", COLS > 18 ? COLS - 18 : 0, "Function (file)");
    attroff(A_REVERSE);
    json_array_foreach(json_object_get(reply, "rows"), i, row)
    {
        char line[1024];

        if (y >= LINES - 1)
            break;
        if (!json_is_string(json_array_get(row, 2)))
            continue;
        snprintf(line, sizeof(line), "%6.1f%% %6.1f%%  %s (%s)", pct(client_int(row, 0), all),
                 pct(client_int(row, 1), all), json_string_value(json_array_get(row, 2)),
                 json_string_value(json_array_get(row, 3)));
        mvaddnstr(y++, 0, line, COLS);
    }
    mvaddnstr(LINES - 1, 0,
              "q quit  o/t sort by own/total  p pause  i idle threads  g GIL only  +/- window",
              COLS);
    refresh();
}

/* The interactive view until q (or the daemon fails: 1). */
static int top_live(struct top_view *v, int interval_ms)
{
    json_t *reply = NULL;
    bool paused = false, again = true;
    int rc = 0;

    initscr();
    cbreak();
    noecho();
    keypad(stdscr, TRUE);
    curs_set(0);
    /* rows are rewritten, not shifted: no insert/delete of lines or characters (what some
     * terminals and emulators get wrong) */
    idlok(stdscr, FALSE);
    idcok(stdscr, FALSE);
    timeout(interval_ms);
    for (;;) {
        int key;

        if (again && !paused) {
            json_t *fresh = top_read(v);

            if (!fresh) {
                rc = 1;
                break;
            }
            json_decref(reply);
            reply = fresh;
        }
        again = true;
        draw(v, reply, paused);
        key = getch();
        if (key == 'q' || key == 'Q')
            break;
        switch (key) {
        case 'o':
            v->by_total = false;
            break;
        case 't':
            v->by_total = true;
            break;
        case 'p':
        case ' ':
            paused = !paused;
            again = false;
            break;
        case 'i':
            v->idle = !v->idle;
            break;
        case 'g':
            v->gil = !v->gil;
            break;
        case '+':
            v->window_s = v->window_s < 86400 ? v->window_s * 2 : v->window_s;
            break;
        case '-':
            v->window_s = v->window_s > 1 ? v->window_s / 2 : 1;
            break;
        case KEY_RESIZE:
            again = false;
            break;
        default:
            break;
        }
        if (paused && key != ERR && key != 'p' && key != ' ')
            paused = false; /* a change shows at once */
    }
    endwin();
    json_decref(reply);
    return rc;
}

int top_main(int argc, char **argv)
{
    static const struct option longopts[] = {{"interval", required_argument, NULL, 'i'},
                                             {"window", required_argument, NULL, 'w'},
                                             {"rows", required_argument, NULL, 'n'},
                                             {"once", no_argument, NULL, '1'},
                                             {"idle", no_argument, NULL, 'I'},
                                             {"gil", no_argument, NULL, 'g'},
                                             {"sort", required_argument, NULL, 's'},
                                             OUTPUT_LONGOPTS,
                                             {"socket", required_argument, NULL, 'S'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    struct top_view v = {.window_s = 5, .rows = 20};
    enum output_format format = OUTPUT_TABLE;
    int c, interval_ms = 1000;
    bool once = false, format_given = false;
    int64_t ns;

    while ((c = getopt_long(argc, argv, "i:w:n:1f:jh", longopts, NULL)) != -1) {
        switch (c) {
        case 'i':
            if (client_parse_duration(optarg, "top", "--interval", 0.1, 3600, &ns) < 0)
                return 2;
            interval_ms = (int)(ns / 1000000);
            break;
        case 'w':
            if (client_parse_duration(optarg, "top", "--window", 1, 30 * 86400, &ns) < 0)
                return 2;
            v.window_s = (int)(ns / 1000000000);
            break;
        case 'n':
            v.rows = atoi(optarg);
            if (v.rows < 1 || v.rows > 10000) {
                fprintf(stderr, "probectl top: --rows takes 1 to 10000, not '%s'\n", optarg);
                return 2;
            }
            break;
        case '1':
            once = true;
            break;
        case 'I':
            v.idle = true;
            break;
        case 'g':
            v.gil = true;
            break;
        case 's':
            if (strcmp(optarg, "own") != 0 && strcmp(optarg, "total") != 0) {
                fprintf(stderr, "probectl top: --sort takes own or total, not '%s'\n", optarg);
                return 2;
            }
            v.by_total = strcmp(optarg, "total") == 0;
            break;
        case 'f':
        case 'j':
            if (output_option(c, optarg, "top", &format) < 0)
                return 2;
            format_given = true;
            break;
        case 'S':
            v.socket = optarg;
            break;
        case 'h':
            printf(
                "usage: probectl top <pid> [--interval D] [--window D] [--rows N] [--sort "
                "own|total]\n"
                "                    [--idle] [--gil] [--once [--format table|csv|json | --json]]\n"
                "  The hottest functions of an attached process, refreshed like top:\n"
                "  %%Own = executing, %%Total = on the stack, over the last --window\n"
                "  (default 5s; 30s, 2m, 1h30m) of samples on CPU (--idle: of every\n"
                "  thread; --gil: holding the GIL); refreshed every --interval (1s).\n"
                "  On a terminal: q quits, o/t sort by own/total, p pauses, i idle,\n"
                "  g GIL, +/- the window. --once (or a pipe): one table.\n");
            return 0;
        default:
            return 2;
        }
    }
    if ((v.pid = client_parse_pid(optind < argc ? argv[optind] : NULL, "top")) < 0)
        return 2;
    if (optind + 1 != argc) {
        fprintf(stderr, "probectl top: one pid (%s is one too many)\n", argv[optind + 1]);
        return 2;
    }
    if (format_given && !once) {
        fprintf(stderr, "probectl top: --format goes with --once\n");
        return 2;
    }
    { /* a pid never attached has no samples to rank: say so, as every command does */
        char path[64];
        json_t *t;

        snprintf(path, sizeof(path), "/v1/targets/%d", v.pid);
        if (!(t = client_request(v.socket, "GET", path, NULL)))
            return 1;
        json_decref(t);
    }
    if (once)
        return top_print(&v, format);
    if (isatty(STDIN_FILENO) && isatty(STDOUT_FILENO))
        return top_live(&v, interval_ms);
    for (;;) { /* a pipe: a table each interval */
        if (top_print(&v, OUTPUT_TABLE) != 0)
            return 1;
        putchar('\n');
        usleep((useconds_t)interval_ms * 1000);
    }
}
