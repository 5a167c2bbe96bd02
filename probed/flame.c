/* flame.c - see flame.h. */
#define _GNU_SOURCE
#include "flame.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SVG_WIDTH 1200
#define FRAME_HEIGHT 16
#define MIN_WIDTH_PX 0.1 /* narrower frames are left out: invisible, and they bloat the file */

char *flame_sql(const struct flame_request *req)
{
    char tid_cond[64] = "";
    char *sql = NULL;

    if (req->tid)
        snprintf(tid_cond, sizeof(tid_cond), " AND tid = %d", (int)req->tid);
    /* The inner ORDER BY fixes the order group_concat sees (SQLite keeps a subquery's order). */
    if (asprintf(&sql,
                 "WITH c AS (SELECT stack_id, count(*) AS n FROM samples"
                 " WHERE stack_id <> 0 AND ts_ns >= %lld%s%s"
                 " AND target_id IN (SELECT id FROM targets WHERE pid = %d)"
                 " GROUP BY stack_id)"
                 " SELECT (SELECT group_concat(name, ';') FROM (SELECT CASE kind"
                 " WHEN 'python' THEN func || ' (' || file || ':' || lineno || ')'"
                 /* native: 'qsort [libc.so.6]', the object's base name */
                 " ELSE func || ' [' || replace(file, rtrim(file, replace(file, '/', '')), '')"
                 " || ']' END AS name FROM stacks WHERE stacks.stack_id = c.stack_id"
                 " ORDER BY depth DESC)) AS folded, n FROM c ORDER BY folded",
                 (long long)req->since_ns, tid_cond, req->idle ? "" : " AND (state & 1) = 1",
                 (int)req->pid) < 0)
        return NULL;
    return sql;
}

char *flame_folded(json_t *rows, size_t *ret_len)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    json_t *row;
    size_t i;

    if (!out)
        return NULL;
    json_array_foreach(rows, i, row)
        fprintf(out, "%s %lld\n", json_string_value(json_array_get(row, 0)),
                (long long)json_integer_value(json_array_get(row, 1)));
    fclose(out);
    *ret_len = len;
    return buf;
}

/* ---- speedscope (https://www.speedscope.app/file-format-schema.json) ---- */

/* Whether @label (a frame of a folded stack) is a native frame: "func [object]". */
static bool is_native_label(const char *label, size_t len)
{
    return len > 3 && label[len - 1] == ']' && memmem(label, len, " [", 2) != NULL;
}

int flame_split_label(const char *label, size_t len, char **ret_func, char **ret_file,
                      int *ret_line)
{
    char *copy = strndup(label, len), *open, *colon;

    if (!copy)
        return -1;
    open = strstr(copy, " (");
    colon = strrchr(copy, ':');
    *ret_line = 0;
    *ret_file = NULL;
    if (is_native_label(copy, len)) { /* "func [object]" */
        char *bracket = strrchr(copy, '[');
        copy[len - 1] = '\0';
        bracket[-1] = '\0';
        *ret_file = strdup(bracket + 1);
    } else if (open && colon && colon > open && len > 0 && copy[len - 1] == ')') {
        copy[len - 1] = '\0';
        *colon = '\0';
        *open = '\0';
        *ret_line = atoi(colon + 1);
        *ret_file = strdup(open + 2);
    }
    *ret_func = copy;
    return 0;
}

/* "func (file:line)" -> a speedscope frame object. */
static json_t *speedscope_frame(const char *label, size_t len)
{
    char *func, *file;
    json_t *f;
    int line;

    if (flame_split_label(label, len, &func, &file, &line) < 0)
        return NULL;
    f = file ? json_pack("{s:s, s:s, s:i}", "name", func, "file", file, "line", line)
             : json_pack("{s:s}", "name", func);
    free(func);
    free(file);
    return f;
}

/* The index of @label in @frames (added when new); @index maps label -> index. */
static json_int_t frame_index(json_t *frames, json_t *index, const char *label, size_t len)
{
    char *key = strndup(label, len);
    json_t *known = key ? json_object_get(index, key) : NULL;
    json_int_t i = known ? json_integer_value(known) : (json_int_t)json_array_size(frames);

    if (key && !known) {
        json_array_append_new(frames, speedscope_frame(label, len));
        json_object_set_new(index, key, json_integer(i));
    }
    free(key);
    return i;
}

char *flame_speedscope(json_t *rows, const char *title, size_t *ret_len)
{
    json_t *frames = json_array(), *index = json_object(), *samples = json_array();
    json_t *weights = json_array(), *doc, *row;
    json_int_t total = 0;
    char *text;
    size_t i;

    json_array_foreach(rows, i, row)
    {
        const char *folded = json_string_value(json_array_get(row, 0));
        json_t *stack = json_array();
        while (folded && *folded) {
            const char *end = strchr(folded, ';');
            size_t len = end ? (size_t)(end - folded) : strlen(folded);
            json_array_append_new(stack, json_integer(frame_index(frames, index, folded, len)));
            folded += len + (end ? 1 : 0);
        }
        json_array_append_new(samples, stack);
        json_array_append(weights, json_array_get(row, 1));
        total += json_integer_value(json_array_get(row, 1));
    }
    json_decref(index);
    doc = json_pack("{s:s, s:s, s:s, s:{s:o}, s:[{s:s, s:s, s:s, s:i, s:I, s:o, s:o}]}", "$schema",
                    "https://www.speedscope.app/file-format-schema.json", "name", title, "exporter",
                    "probed", "shared", "frames", frames, "profiles", "type", "sampled", "name",
                    title, "unit", "none", "startValue", 0, "endValue", total, "samples", samples,
                    "weights", weights);
    text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    json_decref(doc);
    *ret_len = text ? strlen(text) : 0;
    return text;
}

/* ---- the SVG: a tree of frames, laid out by sample count ---- */

struct node {
    char *name;
    int64_t count;
    struct node *child, *next; /* first child, next sibling */
};

static struct node *child_named(struct node *parent, const char *name, size_t len)
{
    struct node *c;

    for (c = parent->child; c; c = c->next)
        if (strlen(c->name) == len && memcmp(c->name, name, len) == 0)
            return c;
    c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->name = strndup(name, len);
    c->next = parent->child;
    parent->child = c;
    return c;
}

static void insert(struct node *root, const char *folded, int64_t n)
{
    struct node *at = root;

    root->count += n;
    while (at && *folded) {
        const char *end = strchr(folded, ';');
        size_t len = end ? (size_t)(end - folded) : strlen(folded);
        at = child_named(at, folded, len);
        if (at)
            at->count += n;
        folded += len + (end ? 1 : 0);
    }
}

static void free_tree(struct node *n)
{
    while (n) {
        struct node *next = n->next;
        free_tree(n->child);
        free(n->name);
        free(n);
        n = next;
    }
}

static int tree_depth(const struct node *n)
{
    int d = 0;

    for (const struct node *c = n->child; c; c = c->next) {
        int cd = tree_depth(c);
        if (cd > d)
            d = cd;
    }
    return d + 1;
}

static void put_escaped(FILE *out, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '<':
            fputs("&lt;", out);
            break;
        case '>':
            fputs("&gt;", out);
            break;
        case '&':
            fputs("&amp;", out);
            break;
        case '"':
            fputs("&quot;", out);
            break;
        default:
            fputc(*s, out);
        }
    }
}

/* Warm colours for Python frames, blues for native ones, stable per function name. */
static void colour(const char *name, int *r, int *g, int *b)
{
    unsigned h = 2166136261u;

    for (const char *p = name; *p && *p != ' '; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    if (is_native_label(name, strlen(name))) {
        *r = 60 + (int)(h % 60);
        *g = 130 + (int)((h >> 8) % 80);
        *b = 200 + (int)((h >> 16) % 55);
        return;
    }
    *r = 205 + (int)(h % 50);
    *g = 80 + (int)((h >> 8) % 150);
    *b = 40 + (int)((h >> 16) % 40);
}

struct layout {
    FILE *out;
    int64_t total;
    int height; /* of the image */
};

/* x: samples to the left of this frame within the whole graph. */
static void emit(struct layout *l, const struct node *n, int depth, int64_t x)
{
    double px_per = (double)(SVG_WIDTH - 20) / (double)l->total;
    double w = (double)n->count * px_per;
    int r, g, b;

    if (w < MIN_WIDTH_PX)
        return;
    if (depth >= 0) {
        colour(n->name, &r, &g, &b);
        fprintf(l->out, "<g class=\"f\" data-x=\"%lld\" data-w=\"%lld\" data-d=\"%d\"><title>",
                (long long)x, (long long)n->count, depth);
        put_escaped(l->out, n->name);
        fprintf(l->out,
                " (%lld samples, %.2f%%)</title><rect x=\"%.1f\" y=\"%d\" width=\"%.1f\""
                " height=\"%d\" fill=\"rgb(%d,%d,%d)\" rx=\"2\"/><text x=\"%.1f\" y=\"%d\">",
                (long long)n->count, 100.0 * (double)n->count / (double)l->total,
                10 + (double)x * px_per, l->height - 40 - (depth + 1) * FRAME_HEIGHT, w,
                FRAME_HEIGHT - 1, r, g, b, 13 + (double)x * px_per,
                l->height - 40 - depth * FRAME_HEIGHT - 4);
        put_escaped(l->out, n->name);
        fputs("</text></g>\n", l->out);
    }
    for (const struct node *c = n->child; c; c = c->next) {
        emit(l, c, depth + 1, x);
        x += c->count;
    }
}

/* Zoom, search and label clipping; runs in the browser. */
static const char svg_script[] =
    "<script><![CDATA[\n"
    "var W="
    "1180"
    ",svg=document.documentElement,frames=[].slice.call(document.querySelectorAll"
    "('g.f'));\n"
    "function fit(g){var t=g.querySelector('text'),r=g.querySelector('rect'),w=+r.getAttribute("
    "'width'),n=g.querySelector('title').textContent.replace(/ \\(\\d+ samples.*$/,'');"
    "t.setAttribute('x',+r.getAttribute('x')+3);if(w<25){t.textContent='';return;}"
    "var c=Math.floor((w-6)/7);t.textContent=n.length>c?n.slice(0,Math.max(c-2,0))+'..':n;}\n"
    "function zoom(z){var zx=+z.dataset.x,zw=+z.dataset.w,zd=+z.dataset.d;"
    "document.getElementById('reset').style.display='';frames.forEach(function(g){var "
    "x=+g.dataset.x,"
    "w=+g.dataset.w,d=+g.dataset.d,r=g.querySelector('rect');"
    "if(d<zd?(x<=zx&&x+w>=zx+zw):(x>=zx&&x+w<=zx+zw)){var nx=d<zd?0:(x-zx)/zw*W,nw=d<zd?W:w/zw*W;"
    "if(nw<0.1){g.style.display='none';return;}g.style.display='';r.setAttribute('x',10+nx);"
    "r.setAttribute('width',nw);g.style.opacity=d<zd?0.6:1;fit(g);}else{g.style.display='none';}});"
    "}\n"
    "function reset(){document.getElementById('reset').style.display='none';frames.forEach("
    "function(g){var r=g.querySelector('rect');g.style.display='';g.style.opacity=1;"
    "r.setAttribute('x',10+(+g.dataset.x)*W/TOTAL);r.setAttribute('width',(+g.dataset.w)*W/TOTAL);"
    "fit(g);});}\n"
    "function search(){var re=prompt('Search (regular expression):');if(re===null)return;"
    "var rx;try{rx=new RegExp(re);}catch(e){alert(e);return;}var hit={};frames.forEach(function(g){"
    "var r=g.querySelector('rect'),n=g.querySelector('title').textContent;"
    "if(re&&rx.test(n)){if(!r.dataset.fill)r.dataset.fill=r.getAttribute('fill');"
    "r.setAttribute('fill','rgb(230,0,230)');"
    "hit[g.dataset.x]=Math.max(hit[g.dataset.x]||0,+g.dataset.w);}"
    "else if(r.dataset.fill){r.setAttribute('fill',r.dataset.fill);}});var s=0,end=-1;"
    "Object.keys(hit).map(Number).sort(function(a,b){return a-b;}).forEach(function(x){"
    "var e=x+hit[x];if(x>=end){s+=hit[x];end=e;}else if(e>end){s+=e-end;end=e;}});"
    "document.getElementById('matched').textContent=re?'Matched: "
    "'+(100*s/TOTAL).toFixed(2)+'%':'';}\n"
    "frames.forEach(function(g){g.addEventListener('click',function(){zoom(g);});fit(g);});\n"
    "document.getElementById('reset').addEventListener('click',reset);\n"
    "document.getElementById('search').addEventListener('click',search);\n"
    "window.addEventListener('keydown',function(e){if((e.ctrlKey||e.metaKey)&&e.key==='f'){"
    "e.preventDefault();search();}});\n"
    "]]></script>\n";

char *flame_svg(json_t *rows, const char *title, size_t *ret_len)
{
    struct node root = {.name = NULL};
    struct layout l = {0};
    char *buf = NULL;
    size_t len = 0;
    json_t *row;
    size_t i;

    json_array_foreach(rows, i, row) insert(&root, json_string_value(json_array_get(row, 0)),
                                            json_integer_value(json_array_get(row, 1)));
    l.out = open_memstream(&buf, &len);
    if (!l.out) {
        free_tree(root.child);
        return NULL;
    }
    l.total = root.count ? root.count : 1;
    l.height = (tree_depth(&root) + 1) * FRAME_HEIGHT + 70;
    fprintf(l.out,
            "<?xml version=\"1.0\" standalone=\"no\"?>\n"
            "<svg version=\"1.1\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\""
            " xmlns=\"http://www.w3.org/2000/svg\">\n"
            "<style>text{font:12px monospace;fill:#000} g.f text{pointer-events:none}"
            " g.f:hover rect{stroke:#000;stroke-width:0.5;cursor:pointer}"
            " .ui{font:12px sans-serif;cursor:pointer}</style>\n"
            "<rect width=\"100%%\" height=\"100%%\" fill=\"#f8f8f0\"/>\n"
            "<text x=\"%d\" y=\"20\" text-anchor=\"middle\" style=\"font:16px sans-serif\">",
            SVG_WIDTH, l.height, SVG_WIDTH, l.height, SVG_WIDTH / 2);
    put_escaped(l.out, title);
    fprintf(l.out,
            " (%lld samples)</text>\n"
            "<text id=\"reset\" class=\"ui\" x=\"10\" y=\"20\" style=\"display:none\">Reset "
            "Zoom</text>\n"
            "<text id=\"search\" class=\"ui\" x=\"%d\" y=\"20\">Search</text>\n"
            "<text id=\"matched\" class=\"ui\" x=\"%d\" y=\"%d\"></text>\n",
            (long long)root.count, SVG_WIDTH - 60, SVG_WIDTH - 160, l.height - 10);
    emit(&l, &root, -1, 0);
    fprintf(l.out, "<script>var TOTAL=%lld;</script>\n%s</svg>\n", (long long)l.total, svg_script);
    fclose(l.out);
    free_tree(root.child);
    *ret_len = len;
    return buf;
}
