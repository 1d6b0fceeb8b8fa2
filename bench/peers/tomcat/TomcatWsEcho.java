/*
 * A WebSocket echo on embedded Tomcat 10.1 (Debian's libtomcat10-embed-java:
 * tomcat10-embed-core and tomcat10-embed-websocket), the peer of
 * bench/ws_echo in bench/ws_measure.sh. Compiled by the bench with plain
 * javac against /usr/share/java; nothing here is committed built.
 *
 *   GET /echo    WebSocket (jakarta.websocket, a programmatic Endpoint):
 *                every text message comes back to its sender, binary too
 *   GET /health  "UP"
 *
 * Bound to 127.0.0.1 on --port (0: any free port); the start line names the
 * port: "tomcat-ws: listening on ws://127.0.0.1:PORT/echo ...". Stopped by
 * SIGTERM (the JVM's default).
 */
import jakarta.servlet.ServletContainerInitializer;
import jakarta.servlet.ServletContext;
import jakarta.servlet.http.HttpServlet;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import jakarta.websocket.DeploymentException;
import jakarta.websocket.Endpoint;
import jakarta.websocket.EndpointConfig;
import jakarta.websocket.MessageHandler;
import jakarta.websocket.Session;
import jakarta.websocket.server.ServerContainer;
import jakarta.websocket.server.ServerEndpointConfig;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.util.Set;

import org.apache.catalina.Context;
import org.apache.catalina.connector.Connector;
import org.apache.catalina.startup.Tomcat;
import org.apache.tomcat.websocket.server.WsSci;

public final class TomcatWsEcho {
    /* One instance per socket (the default configurator's). The basic
     * remote blocks this worker until the echo is written, as a simple
     * echo would; the client has one message in flight per socket. */
    public static final class Echo extends Endpoint {
        @Override
        public void onOpen(Session session, EndpointConfig config) {
            session.addMessageHandler(String.class, (MessageHandler.Whole<String>) msg -> {
                try {
                    session.getBasicRemote().sendText(msg);
                } catch (IOException e) {
                    // the client is gone: Tomcat closes the session
                }
            });
            session.addMessageHandler(ByteBuffer.class, (MessageHandler.Whole<ByteBuffer>) msg -> {
                try {
                    session.getBasicRemote().sendBinary(msg);
                } catch (IOException e) {
                    // as above
                }
            });
        }
    }

    /* Runs after WsSci (initializers start in the order added), which puts
     * the ServerContainer in the context's attributes. */
    static final class AddEcho implements ServletContainerInitializer {
        @Override
        public void onStartup(Set<Class<?>> classes, ServletContext sc) {
            ServerContainer container = (ServerContainer) sc.getAttribute(ServerContainer.class.getName());
            try {
                container.addEndpoint(ServerEndpointConfig.Builder.create(Echo.class, "/echo").build());
            } catch (DeploymentException e) {
                throw new IllegalStateException(e);
            }
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

    /* Tomcat runs a context's filters (WsFilter does the upgrade) only for
     * a request some servlet is mapped to: this one takes the rest. */
    static final class NotFound extends HttpServlet {
        private static final long serialVersionUID = 1L;
        @Override
        protected void doGet(HttpServletRequest req, HttpServletResponse resp) {
            resp.setStatus(404);
        }
    }

    static void usage(String msg) {
        System.err.println("tomcat-ws: " + msg);
        System.err.println("usage: TomcatWsEcho [--port N] [--threads N] [--max-connections N]");
        System.exit(2);
    }

    public static void main(String[] args) throws Exception {
        long t0 = System.nanoTime();
        int port = 0, threads = 200, maxConnections = 10000;
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            if (i + 1 >= args.length)
                usage(a + " needs a value");
            try {
                switch (a) {
                    case "--port": port = Integer.parseInt(args[++i]); break;
                    case "--threads": threads = Integer.parseInt(args[++i]); break;
                    case "--max-connections": maxConnections = Integer.parseInt(args[++i]); break;
                    default: usage("unknown option '" + a + "'");
                }
            } catch (NumberFormatException e) {
                usage(a + " '" + args[i] + "' is not a whole number");
            }
        }

        Tomcat tomcat = new Tomcat();
        tomcat.setBaseDir(Files.createTempDirectory("tomcat-ws").toString());
        Connector conn = new Connector(); // HTTP/1.1, NIO
        conn.setPort(port);
        conn.setProperty("address", "127.0.0.1");
        conn.setProperty("maxThreads", Integer.toString(threads));
        // The same listen backlog as libsrv's default (Tomcat's is 100).
        conn.setProperty("acceptCount", "4096");
        // Tomcat's NIO connector takes 8192 connections by default: the idle
        // sockets' count must fit, as SRV_MAX_CONNECTIONS does for libsrv.
        conn.setProperty("maxConnections", Integer.toString(maxConnections));
        tomcat.getService().addConnector(conn);
        tomcat.setConnector(conn);

        Context ctx = tomcat.addContext("", null);
        ctx.addServletContainerInitializer(new WsSci(), null);
        ctx.addServletContainerInitializer(new AddEcho(), null);
        Tomcat.addServlet(ctx, "health", new Health());
        ctx.addServletMapping("/health", "health");
        Tomcat.addServlet(ctx, "default", new NotFound());
        ctx.addServletMapping("/", "default");
        tomcat.start();

        double ms = (System.nanoTime() - t0) / 1e6;
        System.out.printf("tomcat-ws: listening on ws://127.0.0.1:%d/echo workers=%d max-connections=%d startup=%.1fms%n",
                          conn.getLocalPort(), threads, maxConnections, ms);
        System.out.flush();
        tomcat.getServer().await();
    }
}
