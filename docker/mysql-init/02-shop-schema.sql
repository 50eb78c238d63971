-- Demo schema captured by the example DAG (BINLOG_CDC_TABLES=shop.*). Run once on the first start, in
-- the database MYSQL_DATABASE (shop). Every table has a primary key: the merge keys rows by it.
CREATE TABLE IF NOT EXISTS customers (
    id         BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    email      VARCHAR(255) NOT NULL UNIQUE,
    name       VARCHAR(255) NOT NULL,
    created_at DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
);

CREATE TABLE IF NOT EXISTS orders (
    id          BIGINT         NOT NULL AUTO_INCREMENT PRIMARY KEY,
    customer_id BIGINT         NOT NULL,
    amount      DECIMAL(12, 2) NOT NULL,
    status      ENUM('new', 'paid', 'shipped', 'cancelled') NOT NULL DEFAULT 'new',
    updated_at  DATETIME(6)    NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
    CONSTRAINT fk_orders_customer FOREIGN KEY (customer_id) REFERENCES customers (id)
);
