# Shared by the static-file scripts (bench/static_measure.sh,
# bench/static_profile.sh, bench/static_many.sh); sourced, not run.

# static_wait URL WHO: wait up to 5 s for URL to answer.
static_wait() {
    i=0
    while ! curl -s -o /dev/null "$1"; do
        i=$((i + 1))
        [ $i -lt 50 ] || { echo "$2: nothing at $1" >&2; return 1; }
        sleep 0.1
    done
}

# static_nginx_start DIR PORT: nginx serving DIR at /static/ (sendfile on,
# 2 workers, no open_file_cache), its pid file in DIR/nginx.pid. False
# without nginx.
static_nginx_start() {
    command -v nginx >/dev/null 2>&1 || return 1
    cat > "$1/nginx.conf" <<CONF
worker_processes 2;
error_log $1/error.log;
pid $1/nginx.pid;
events { worker_connections 4096; }
http {
    access_log off;
    sendfile on;
    keepalive_requests 100000000;
    client_body_temp_path $1/client_body;
    proxy_temp_path $1/proxy;
    fastcgi_temp_path $1/fastcgi;
    uwsgi_temp_path $1/uwsgi;
    scgi_temp_path $1/scgi;
    server { listen 127.0.0.1:$2; location /static/ { alias $1/; } }
}
CONF
    nginx -c "$1/nginx.conf" -p "$1" 2>/dev/null
}

# static_nginx_stop DIR
static_nginx_stop() {
    kill "$(cat "$1/nginx.pid" 2>/dev/null)" 2>/dev/null || true
    sleep 0.3
}
