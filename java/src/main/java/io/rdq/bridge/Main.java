package io.rdq.bridge;

import java.io.IOException;
import java.io.InputStream;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.io.OutputStream;
import java.nio.ByteBuffer;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;

/**
 * The bridge that lets rdq's Python compliance kit drive this binding: it serves the storage
 * contract's operations as JSON lines (see {@link Session}). A test harness, not a server for
 * production use.
 *
 * <pre>
 *   java -cp CLASSPATH io.rdq.bridge.Main --stdio          one session on stdin/stdout
 *   java -cp CLASSPATH io.rdq.bridge.Main --socket PATH    a session per connection on a Unix
 *                                                          socket; prints "ready" once listening
 *                                                          and exits when stdin closes
 * </pre>
 */
public final class Main {
    private Main() {}

    public static void main(String[] args) throws IOException {
        ExecutorService pool = Executors.newCachedThreadPool(runnable -> {
            Thread thread = new Thread(runnable, "rdq-bridge");
            thread.setDaemon(true);
            return thread;
        });
        if (args.length == 1 && args[0].equals("--stdio")) {
            new Session(System.in, System.out, pool).run();
            System.exit(0);
        } else if (args.length == 2 && args[0].equals("--socket")) {
            serve(Path.of(args[1]), pool);
        } else {
            System.err.println("usage: io.rdq.bridge.Main --stdio | --socket PATH");
            System.exit(2);
        }
    }

    // Channels.newInputStream/newOutputStream lock a socket channel's blocking lock for reads and
    // writes alike, so a session blocked reading could never answer: these go to the channel,
    // which reads and writes under separate locks.
    private static InputStream input(SocketChannel channel) {
        return new InputStream() {
            @Override
            public int read() throws IOException {
                byte[] one = new byte[1];
                return read(one, 0, 1) < 0 ? -1 : one[0] & 0xff;
            }

            @Override
            public int read(byte[] buffer, int offset, int length) throws IOException {
                return channel.read(ByteBuffer.wrap(buffer, offset, length));
            }

            @Override
            public void close() throws IOException {
                channel.close();
            }
        };
    }

    private static OutputStream output(SocketChannel channel) {
        return new OutputStream() {
            @Override
            public void write(int b) throws IOException {
                write(new byte[] {(byte) b}, 0, 1);
            }

            @Override
            public void write(byte[] buffer, int offset, int length) throws IOException {
                ByteBuffer bytes = ByteBuffer.wrap(buffer, offset, length);
                while (bytes.hasRemaining()) {
                    channel.write(bytes);
                }
            }
        };
    }

    private static void serve(Path path, ExecutorService pool) throws IOException {
        Files.deleteIfExists(path);
        ServerSocketChannel server = ServerSocketChannel.open(StandardProtocolFamily.UNIX);
        server.bind(UnixDomainSocketAddress.of(path));
        Thread acceptor = new Thread(() -> {
            while (true) {
                try {
                    SocketChannel client = server.accept();
                    pool.execute(new Session(input(client), output(client), pool));
                } catch (IOException e) {
                    return;
                }
            }
        }, "rdq-bridge-accept");
        acceptor.setDaemon(true);
        acceptor.start();
        System.out.println("ready");
        System.out.flush();
        // the parent process owns the server's life: it ends when the parent closes stdin
        InputStream stdin = System.in;
        while (stdin.read() >= 0) {
            // nothing is read from stdin but its end
        }
        server.close();
        Files.deleteIfExists(path);
        System.exit(0);
    }
}
