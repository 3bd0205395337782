import java.io.FileWriter;
import java.time.Instant;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.RetryOneTime;

/** lc-cli's test peer: takes one Curator lock, logs "start NS"/"end NS" as the shell commands do. */
public class CuratorPeer {
    static void log(String file, String what) throws Exception {
        Instant t = Instant.now();
        long ns = t.getEpochSecond() * 1_000_000_000L + t.getNano();
        try (FileWriter w = new FileWriter(file, true)) { w.write(what + " " + ns + "\n"); }
    }
    public static void main(String[] a) throws Exception {
        String connect = a[0], path = a[1], mode = a[2];
        int n = Integer.parseInt(a[3]);
        long holdMs = Long.parseLong(a[4]);
        String file = a[5], tag = a[6];
        CuratorFramework c = CuratorFrameworkFactory.newClient(connect, 10000, 5000, new RetryOneTime(100));
        c.start();
        c.blockUntilConnected();
        if (mode.equals("sem")) {
            InterProcessSemaphoreV2 s = new InterProcessSemaphoreV2(c, path, n);
            System.out.println("waiting"); System.out.flush();
            Lease l = s.acquire();
            log(file, "start " + tag);
            Thread.sleep(holdMs);
            log(file, "end " + tag);
            s.returnLease(l);
        } else {
            InterProcessReadWriteLock rw = new InterProcessReadWriteLock(c, path);
            InterProcessMutex m = mode.equals("mutex") ? new InterProcessMutex(c, path)
                : mode.equals("read") ? rw.readLock() : rw.writeLock();
            System.out.println("waiting"); System.out.flush();
            m.acquire();
            log(file, "start " + tag);
            Thread.sleep(holdMs);
            log(file, "end " + tag);
            m.release();
        }
        c.close();
    }
}
