/*
 * The Greetings contract on embedded Tomcat 10.1 (Debian's
 * libtomcat10-embed-java), for bench/compare --peers. Compiled by the bench
 * with plain javac against /usr/share/java; nothing here is committed built.
 *
 *   GET /greetings?name=X  "<Hello|Hi|Olá|Oi|Hallo> X!" (World by default)
 *                          after --sleep-ms on the request's worker thread
 *                          (blocking), or from a scheduled executor with no
 *                          worker held (--async: an AsyncContext), or at
 *                          once (--sleep-ms 0: the hello scenario)
 *   GET /health            "UP"
 *
 * Bound to 127.0.0.1 on --port (0: any free port); the start line names the
 * port like greetings' does: "tomcat: listening on http://127.0.0.1:PORT
 * workers=N mode=M startup=Tms". Stopped by SIGTERM (the JVM's default).
 */
import jakarta.servlet.AsyncContext;
import jakarta.servlet.http.HttpServlet;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;

import org.apache.catalina.Context;
import org.apache.catalina.connector.Connector;
import org.apache.catalina.startup.Tomcat;

public final class TomcatGreetings {
    static final String[] WORDS = {"Hello", "Hi", "Olá", "Oi", "Hallo"};

    static void greet(HttpServletRequest req, HttpServletResponse resp) throws IOException {
        String name = req.getParameter("name");
        if (name == null || name.isEmpty())
            name = "World";
        String word = WORDS[ThreadLocalRandom.current().nextInt(WORDS.length)];
        byte[] body = (word + " " + name + "!").getBytes(StandardCharsets.UTF_8);
        resp.setStatus(200);
        resp.setContentType("text/plain; charset=utf-8");
        resp.setContentLength(body.length);
        resp.getOutputStream().write(body);
    }

    static final class Greetings extends HttpServlet {
        private static final long serialVersionUID = 1L;
        final long sleepMs;
        final transient ScheduledExecutorService timer;

        Greetings(long sleepMs, ScheduledExecutorService timer) {
            this.sleepMs = sleepMs;
            this.timer = timer;
        }

        @Override
        protected void doGet(HttpServletRequest req, HttpServletResponse resp) throws IOException {
            if (timer != null) {
                // The worker returns at once; the timer thread answers.
                AsyncContext ac = req.startAsync();
                ac.setTimeout(sleepMs + 10000);
                timer.schedule(() -> {
                    try {
                        greet((HttpServletRequest) ac.getRequest(),
                              (HttpServletResponse) ac.getResponse());
                    } catch (IOException e) {
                        // client gone: nothing to answer
                    } finally {
                        ac.complete();
                    }
                }, sleepMs, TimeUnit.MILLISECONDS);
                return;
            }
            if (sleepMs > 0) {
                try {
                    Thread.sleep(sleepMs); // holds this worker, like the seeds' servers
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
            greet(req, resp);
        }
    }

    static final class Health extends HttpServlet {
        private static final long serialVersionUID = 1L;
        @Override
        protected void doGet(HttpServletRequest req, HttpServletResponse resp) throws IOException {
            resp.setStatus(200);
            resp.setContentType("text/plain; charset=utf-8");
            resp.setContentLength(2);
            resp.getOutputStream().write(new byte[] {'U', 'P'});
        }
    }

    static void usage(String msg) {
        System.err.println("tomcat-greetings: " + msg);
        System.err.println("usage: TomcatGreetings [--port N] [--threads N] [--sleep-ms N] [--async]");
        System.exit(2);
    }

    public static void main(String[] args) throws Exception {
        long t0 = System.nanoTime();
        int port = 0, threads = 200;
        long sleepMs = 1000;
        boolean async = false;
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            if (a.equals("--async")) {
                async = true;
                continue;
            }
            if (i + 1 >= args.length)
                usage(a + " needs a value");
            try {
                switch (a) {
                    case "--port": port = Integer.parseInt(args[++i]); break;
                    case "--threads": threads = Integer.parseInt(args[++i]); break;
                    case "--sleep-ms": sleepMs = Long.parseLong(args[++i]); break;
                    default: usage("unknown option '" + a + "'");
                }
            } catch (NumberFormatException e) {
                usage(a + " '" + args[i] + "' is not a whole number");
            }
        }
        ScheduledExecutorService timer = null;
        if (async && sleepMs > 0)
            timer = Executors.newScheduledThreadPool(1, r -> {
                Thread t = new Thread(r, "greetings-timer");
                t.setDaemon(true);
                return t;
            });

        Tomcat tomcat = new Tomcat();
        tomcat.setBaseDir(Files.createTempDirectory("tomcat-greetings").toString());
        Connector conn = new Connector(); // HTTP/1.1, NIO
        conn.setPort(port);
        conn.setProperty("address", "127.0.0.1");
        conn.setProperty("maxThreads", Integer.toString(threads));
        // The same listen backlog as libsrv's default (Tomcat's is 100).
        conn.setProperty("acceptCount", "4096");
        // No cap on requests per kept-alive connection, as in libsrv, Jetty and
        // the nginx config (Tomcat closes after 100 by default).
        conn.setProperty("maxKeepAliveRequests", "-1");
        tomcat.getService().addConnector(conn);
        tomcat.setConnector(conn);

        Context ctx = tomcat.addContext("", null);
        Tomcat.addServlet(ctx, "greetings", new Greetings(sleepMs, timer)).setAsyncSupported(true);
        ctx.addServletMapping("/greetings", "greetings");
        Tomcat.addServlet(ctx, "health", new Health());
        ctx.addServletMapping("/health", "health");
        tomcat.start();

        double ms = (System.nanoTime() - t0) / 1e6;
        System.out.printf("tomcat: listening on http://127.0.0.1:%d workers=%d mode=%s startup=%.1fms%n",
                          conn.getLocalPort(), threads, async ? "async" : "blocking", ms);
        System.out.flush();
        tomcat.getServer().await();
    }
}
