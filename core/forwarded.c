/*
 * Trusted proxies: who the client is behind a load balancer. The
 * forwarding headers (RFC 7239 Forwarded; X-Forwarded-For, -Proto, -Host)
 * are believed only when the TCP peer is a configured trusted proxy, and
 * then only as far as the chain stays trusted: walking the hops right to
 * left (the nearest proxy appended the rightmost), the client is the first
 * hop that is not a trusted proxy. Anything left of it was written by that
 * untrusted client and says nothing (Tomcat's RemoteIpValve and Spring's
 * ForwardedHeaderFilter do the same walk). Without trusted proxies, or
 * from an untrusted peer, the headers change nothing: the client is the
 * peer, the scheme the port's own, the host the Host header.
 */
#include "srv_core.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct srv__proxy_net {
    int family; /* AF_INET or AF_INET6 */
    unsigned char addr[16];
    unsigned bits;
};

struct srv__proxies {
    size_t n;
    struct srv__proxy_net net[];
};

/* ---- addresses ------------------------------------------------------ */

/* A bare address, "[v6]", "[v6]:port" or "v4:port" into family/bytes. */
static int srv__addr_parse(const char *s, size_t len, int *family, unsigned char out[16])
{
    char buf[INET6_ADDRSTRLEN + 8];
    if (len == 0 || len >= sizeof buf)
        return -1;
    if (s[0] == '[') {
        const char *end = memchr(s, ']', len);
        if (end == NULL)
            return -1;
        size_t after = len - (size_t)(end + 1 - s);
        if (after != 0 && end[1] != ':')
            return -1;
        len = (size_t)(end - s - 1);
        s++;
        memcpy(buf, s, len);
        buf[len] = '\0';
        *family = AF_INET6;
        return inet_pton(AF_INET6, buf, out) == 1 ? 0 : -1;
    }
    memcpy(buf, s, len);
    buf[len] = '\0';
    const char *colon = strchr(buf, ':');
    if (colon != NULL && strchr(colon + 1, ':') == NULL)
        buf[colon - buf] = '\0'; /* "v4:port" */
    if (inet_pton(AF_INET, buf, out) == 1) {
        *family = AF_INET;
        return 0;
    }
    *family = AF_INET6;
    return inet_pton(AF_INET6, buf, out) == 1 ? 0 : -1;
}

/* IPv4-mapped IPv6 (::ffff:a.b.c.d, what a dual-stack socket reports for
 * an IPv4 client) matches IPv4 blocks. */
static void srv__addr_unmap(int *family, unsigned char a[16])
{
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (*family == AF_INET6 && memcmp(a, mapped, 12) == 0) {
        memmove(a, a + 12, 4);
        *family = AF_INET;
    }
}

static bool srv__proxies_trust(const struct srv__proxies *p, int family, const unsigned char *a)
{
    for (size_t i = 0; i < p->n; i++) {
        const struct srv__proxy_net *net = &p->net[i];
        if (net->family != family)
            continue;
        unsigned full = net->bits / 8, rest = net->bits % 8;
        if (memcmp(net->addr, a, full) != 0)
            continue;
        if (rest == 0 || ((net->addr[full] ^ a[full]) & (0xff00u >> rest) & 0xff) == 0)
            return true;
    }
    return false;
}

/* ---- configuration ---------------------------------------------------- */

int srv__forwarded_init(srv_server *srv)
{
    return srv__config_own(&srv->trusted_proxies, &srv->cfg.trusted_proxies);
}

int srv__forwarded_start(srv_server *srv)
{
    const char *list = srv->cfg.trusted_proxies;
    if (list == NULL || list[0] == '\0')
        return 0;
    size_t count = 1;
    for (const char *c = list; *c; c++)
        count += *c == ',';
    struct srv__proxies *p = calloc(1, sizeof *p + count * sizeof p->net[0]);
    if (p == NULL)
        return SRV_ENOMEM;
    for (const char *s = list; *s;) {
        const char *comma = strchr(s, ',');
        size_t len = comma ? (size_t)(comma - s) : strlen(s);
        const char *b = s, *e = s + len;
        while (b < e && isspace((unsigned char)*b))
            b++;
        while (e > b && isspace((unsigned char)e[-1]))
            e--;
        /* "address" or "address/bits", the address bare (no brackets, no port). */
        struct srv__proxy_net *net = &p->net[p->n];
        const char *slash = memchr(b, '/', (size_t)(e - b));
        size_t alen = slash ? (size_t)(slash - b) : (size_t)(e - b);
        char addr[INET6_ADDRSTRLEN];
        bool ok = alen > 0 && alen < sizeof addr;
        if (ok) {
            memcpy(addr, b, alen);
            addr[alen] = '\0';
            net->family = inet_pton(AF_INET, addr, net->addr) == 1 ? AF_INET : AF_INET6;
            ok = net->family == AF_INET || inet_pton(AF_INET6, addr, net->addr) == 1;
        }
        unsigned max = net->family == AF_INET ? 32 : 128;
        net->bits = max;
        if (ok && slash != NULL) {
            const char *d = slash + 1;
            unsigned bits = 0;
            ok = d < e && e - d <= 3;
            for (; ok && d < e; d++) {
                ok = isdigit((unsigned char)*d);
                bits = bits * 10 + (unsigned)(*d - '0');
            }
            ok = ok && bits <= max;
            net->bits = bits;
        }
        if (!ok) {
            srv__server_set_error(srv, "trusted_proxies: \"%.*s\" is not an IPv4 or IPv6 "
                                  "address or CIDR block (e.g. 10.0.0.0/8, 127.0.0.1, ::1, "
                                  "fd00::/8); separate entries with commas",
                                  (int)((e - b) > 80 ? 80 : (e - b)), b);
            free(p);
            return SRV_EINVAL;
        }
        /* Host bits set under the mask (10.1.2.3/8) are cleared: the block
         * is what was meant. */
        for (unsigned bit = net->bits; bit < max; bit++)
            net->addr[bit / 8] &= (unsigned char)~(0x80u >> (bit % 8));
        p->n++;
        if (comma == NULL)
            break;
        s = comma + 1;
    }
    srv->proxies = p;
    return 0;
}

void srv__forwarded_free(srv_server *srv)
{
    free(srv->proxies);
    srv->proxies = NULL;
    free(srv->trusted_proxies);
    srv->trusted_proxies = NULL;
}

/* ---- the walk --------------------------------------------------------- */

/* Hops kept, the rightmost ones (those the trusted proxies appended; a
 * client can pad the left as it likes). */
#define SRV__MAX_HOPS 32

typedef struct srv__hop {
    const char *node, *proto, *host; /* into a copy of the header, NUL-terminated */
} srv__hop;

/* A client identifier that is no address (RFC 7239 "unknown" or an
 * obfuscated "_name"): a token, kept as the client's name. */
static bool srv__is_ident(const char *s)
{
    if (strcasecmp(s, "unknown") == 0)
        return true;
    if (s[0] != '_' || strlen(s) > 63)
        return false;
    for (const char *c = s + 1; *c; c++)
        if (!isalnum((unsigned char)*c) && *c != '.' && *c != '_' && *c != '-')
            return false;
    return true;
}

/* A Host value we repeat to the application: host[:port] characters only
 * (a name, an IPv4 or a bracketed IPv6 address), at most 255 bytes. */
static bool srv__is_host(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 255)
        return false;
    for (const char *c = s; *c; c++)
        if (!isalnum((unsigned char)*c) && strchr("-._:[]", *c) == NULL)
            return false;
    return true;
}

static char *srv__trim(char *b, char *e)
{
    while (b < e && (*b == ' ' || *b == '\t'))
        b++;
    while (e > b && (e[-1] == ' ' || e[-1] == '\t'))
        e--;
    *e = '\0';
    return b;
}

/* Unquote an RFC 7239 value in place ("\"[::1]:80\"" -> "[::1]:80"). */
static char *srv__unquote(char *v)
{
    size_t n = strlen(v);
    if (n >= 2 && v[0] == '"' && v[n - 1] == '"') {
        v[n - 1] = '\0';
        char *o = v, *i = v + 1;
        for (; *i; i++) {
            if (*i == '\\' && i[1])
                i++;
            *o++ = *i;
        }
        *o = '\0';
    }
    return v;
}

/* Every header line `name` joined with commas, in order, in the arena. */
static char *srv__joined(srv_request *req, const char *name)
{
    size_t total = 0, count = 0;
    for (size_t i = 0; i < req->header_count; i++)
        if (strcasecmp(req->headers[i].name, name) == 0) {
            total += strlen(req->headers[i].value) + 1;
            count++;
        }
    if (count == 0)
        return NULL;
    char *out = srv__arena_alloc(&req->arena, total + 1), *o = out;
    if (out == NULL)
        return NULL;
    for (size_t i = 0; i < req->header_count; i++)
        if (strcasecmp(req->headers[i].name, name) == 0) {
            if (o != out)
                *o++ = ',';
            size_t n = strlen(req->headers[i].value);
            memcpy(o, req->headers[i].value, n);
            o += n;
        }
    *o = '\0';
    return out;
}

/* Forwarded: for=a;proto=https;host=x, for=b -> hops (RFC 7239 4). */
static size_t srv__parse_forwarded(char *v, srv__hop *hops)
{
    size_t n = 0;
    for (char *elem = v; elem != NULL;) {
        char *next = NULL;
        bool quoted = false;
        for (char *c = elem; *c; c++) { /* a comma inside quotes is data */
            if (*c == '"' && (c == elem || c[-1] != '\\'))
                quoted = !quoted;
            else if (*c == ',' && !quoted) {
                next = c;
                break;
            }
        }
        char *end = next ? next : elem + strlen(elem);
        srv__hop h = {NULL, NULL, NULL};
        for (char *pair = elem; pair < end;) {
            char *semi = memchr(pair, ';', (size_t)(end - pair));
            char *pend = semi ? semi : end;
            char *eq = memchr(pair, '=', (size_t)(pend - pair));
            if (eq != NULL) {
                char *key = srv__trim(pair, eq);
                char *val = srv__unquote(srv__trim(eq + 1, pend));
                if (strcasecmp(key, "for") == 0)
                    h.node = val;
                else if (strcasecmp(key, "proto") == 0)
                    h.proto = val;
                else if (strcasecmp(key, "host") == 0)
                    h.host = val;
            }
            pair = pend + 1;
        }
        if (n == SRV__MAX_HOPS) { /* drop the leftmost */
            memmove(hops, hops + 1, (SRV__MAX_HOPS - 1) * sizeof *hops);
            n--;
        }
        hops[n++] = h;
        elem = next ? next + 1 : NULL;
    }
    return n;
}

/* A comma list (X-Forwarded-For, -Proto, -Host) into out[]. */
static size_t srv__parse_list(char *v, const char **out)
{
    size_t n = 0;
    for (char *s = v; s != NULL;) {
        char *comma = strchr(s, ',');
        char *end = comma ? comma : s + strlen(s);
        if (n == SRV__MAX_HOPS) { /* drop the leftmost */
            memmove(out, out + 1, (SRV__MAX_HOPS - 1) * sizeof *out);
            n--;
        }
        out[n++] = srv__trim(s, end);
        s = comma ? comma + 1 : NULL;
    }
    return n;
}

/* The request's client, scheme and host (req->client, req->scheme,
 * req->host), on the thread that dispatches it, before any handler. */
void srv__forwarded_resolve(srv_request *req)
{
    const struct srv__proxies *p = req->srv->proxies;
    if (p == NULL || req->peer_family == 0)
        return;
    unsigned char a[16];
    memcpy(a, req->peer_addr, sizeof a);
    if (!srv__proxies_trust(p, req->peer_family, a))
        return; /* spoofing from an untrusted peer changes nothing */

    srv__hop hops[SRV__MAX_HOPS];
    size_t n = 0;
    char *fwd = srv__joined(req, "forwarded");
    if (fwd != NULL) {
        n = srv__parse_forwarded(fwd, hops);
    } else {
        char *xff = srv__joined(req, "x-forwarded-for");
        if (xff == NULL)
            return;
        const char *nodes[SRV__MAX_HOPS], *protos[SRV__MAX_HOPS], *hosts[SRV__MAX_HOPS];
        n = srv__parse_list(xff, nodes);
        char *xfp = srv__joined(req, "x-forwarded-proto");
        char *xfh = srv__joined(req, "x-forwarded-host");
        size_t np = xfp ? srv__parse_list(xfp, protos) : 0;
        size_t nh = xfh ? srv__parse_list(xfh, hosts) : 0;
        for (size_t i = 0; i < n; i++) {
            /* Lists as long as X-Forwarded-For line up with it hop by hop;
             * otherwise the nearest proxy's (rightmost) value counts. */
            hops[i].node = nodes[i];
            hops[i].proto = np == n ? protos[i] : np ? protos[np - 1] : NULL;
            hops[i].host = nh == n ? hosts[i] : nh ? hosts[nh - 1] : NULL;
        }
    }
    if (n == 0)
        return;
    /* Right to left, past trusted proxies, to the first hop that is not. */
    size_t i = n;
    while (i-- > 0) {
        const char *node = hops[i].node;
        int fam;
        if (node == NULL)
            return; /* a Forwarded element without for=: the chain is unknown */
        if (srv__addr_parse(node, strlen(node), &fam, a) != 0) {
            if (!srv__is_ident(node))
                return; /* garbage where a proxy's entry should be: believe none of it */
            break;
        }
        srv__addr_unmap(&fam, a);
        if (!srv__proxies_trust(p, fam, a) || i == 0)
            break; /* the client (or, every hop trusted, the leftmost) */
    }
    const char *node = hops[i].node;
    int fam;
    char client[64];
    if (srv__addr_parse(node, strlen(node), &fam, a) == 0) {
        srv__addr_unmap(&fam, a);
        inet_ntop(fam, a, client, sizeof client);
    } else {
        snprintf(client, sizeof client, "%s", node);
    }
    const char *kept = srv__arena_strndup(&req->arena, client, strlen(client));
    /* Out of memory: unknown, never the proxy's own address. */
    req->client = kept != NULL ? kept : "-";
    const char *proto = hops[i].proto;
    if (proto != NULL && (strcasecmp(proto, "https") == 0 || strcasecmp(proto, "http") == 0))
        req->scheme = strcasecmp(proto, "https") == 0 ? "https" : "http";
    if (hops[i].host != NULL && srv__is_host(hops[i].host))
        req->host = hops[i].host; /* in the arena, with the request */
}

/* ---- the accessors ---------------------------------------------------- */

const char *srv_request_client_addr(const srv_request *req)
{
    return srv__request_client_text(req);
}

const char *srv_request_scheme(const srv_request *req)
{
    if (req->scheme != NULL)
        return req->scheme;
    return srv__tls_enabled(req->srv) ? "https" : "http";
}

const char *srv_request_host(const srv_request *req)
{
    return req->host != NULL ? req->host : srv_request_header(req, "host");
}
