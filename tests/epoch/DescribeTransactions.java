// Kafka's own view of transactional ids, from outside eosbatch: Admin.describeTransactions (KIP-664), the API
// behind `kafka-transactions.sh describe`. Run by tests/epoch/kafka_view.py:
//   java -cp '<classes>:<the broker's jars>/*' DescribeTransactions <bootstrap>
// It reads one transactional id a line from stdin and answers each with one line (one JVM for many questions):
//   <id> <producer id> <producer epoch> <state> <coordinator id>
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.TransactionDescription;

public class DescribeTransactions {
    public static void main(String[] args) throws Exception {
        Properties config = new Properties();
        config.put("bootstrap.servers", args[0]);
        try (Admin admin = Admin.create(config);
             BufferedReader in = new BufferedReader(new InputStreamReader(System.in))) {
            for (String id = in.readLine(); id != null; id = in.readLine()) {
                TransactionDescription d = admin.describeTransactions(List.of(id)).description(id)
                        .get(60, TimeUnit.SECONDS);
                System.out.println(id + " " + d.producerId() + " " + d.producerEpoch() + " " + d.state() + " "
                        + d.coordinatorId());
                System.out.flush();
            }
        }
    }
}
