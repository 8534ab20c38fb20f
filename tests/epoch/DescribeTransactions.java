// Kafka's own view of transactional ids, from outside eosbatch: Admin.describeTransactions (KIP-664), the API
// behind `kafka-transactions.sh describe`. Run by tests/epoch/kafka_view.py as a single-file source program:
//   java -cp '<the broker's jars>/*' DescribeTransactions.java <bootstrap> <transactional id>...
// One line per id: <id> <producer id> <producer epoch> <state> <coordinator id>.
import java.util.List;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.TransactionDescription;

public class DescribeTransactions {
    public static void main(String[] args) throws Exception {
        Properties config = new Properties();
        config.put("bootstrap.servers", args[0]);
        try (Admin admin = Admin.create(config)) {
            List<String> ids = List.of(args).subList(1, args.length);
            var described = admin.describeTransactions(ids);
            for (String id : ids) {
                TransactionDescription d = described.description(id).get(60, TimeUnit.SECONDS);
                System.out.println(id + " " + d.producerId() + " " + d.producerEpoch() + " " + d.state() + " "
                        + d.coordinatorId());
            }
        }
    }
}
