/*
 * flame_svg.c - a profile as an interactive SVG flame graph (flame.h): a tree of frames laid
 * out by sample count; hover for counts and share, click to zoom, Ctrl-F/"Search" to
 * highlight a regular expression. Python frames warm, native ones blue.
 */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/flame.h"

#define SVG_WIDTH 1200
#define FRAME_HEIGHT 16
#define MIN_WIDTH_PX 0.1 /* narrower frames are left out: invisible, and they bloat the file */

struct node {
    char *name; /* the frame's label */
    bool native;
    int64_t count;
    struct node *child, *next; /* first child, next sibling */
};

/* @parent's child for frame @f, added when new; NULL when out of memory. */
static struct node *child_of(struct node *parent, const struct flame_frame *f)
{
    char *name = flame_label(f);
    struct node *c;

    if (!name)
        return NULL;
    for (c = parent->child; c; c = c->next)
        if (c->native == f->native && strcmp(c->name, name) == 0) {
            free(name);
            return c;
        }
    c = calloc(1, sizeof(*c));
    if (!c) {
        free(name);
        return NULL;
    }
    c->name = name;
    c->native = f->native;
    c->next = parent->child;
    parent->child = c;
    return c;
}

/* Adds stack @st's samples along its path from @root; false when out of memory. */
static bool insert(struct node *root, const struct flame_stack *st)
{
    struct node *at = root;

    root->count += st->count;
    for (size_t k = 0; at && k < st->n_frames; k++) {
        at = child_of(at, &st->frames[k]);
        if (at)
            at->count += st->count;
    }
    return at != NULL;
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
static void colour(const struct node *n, int *r, int *g, int *b)
{
    unsigned h = 2166136261u;

    for (const char *p = n->name; *p && *p != ' '; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    if (n->native) {
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
        colour(n, &r, &g, &b);
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

char *flame_svg(const struct flame_profile *p, const char *title, size_t *ret_len)
{
    struct node root = {.name = NULL};
    struct layout l = {0};
    char *buf = NULL;
    size_t len = 0;
    bool ok = true;

    for (size_t i = 0; i < p->n_stacks && ok; i++)
        ok = insert(&root, &p->stacks[i]);
    l.out = ok ? open_memstream(&buf, &len) : NULL;
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
