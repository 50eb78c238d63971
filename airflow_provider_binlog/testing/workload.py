"""A shop-like schema and a concurrent write workload, for the demo, system tests and benchmarks.

The schema covers the types a CDC pipeline must carry exactly: unsigned BIGINT, DECIMAL, DATETIME(6),
TIMESTAMP, JSON, ENUM, BLOB and utf8mb4 text, a composite primary key, and an AUTO_INCREMENT key.
The workload mixes inserts, updates, deletes, primary-key updates and multi-table transactions.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

SHOP_TABLES = ("customers", "products", "orders", "order_items")

SHOP_SCHEMA = (
    """CREATE TABLE `{db}`.customers (
        id BIGINT UNSIGNED NOT NULL PRIMARY KEY,
        email VARCHAR(120) NOT NULL,
        name VARCHAR(80) NOT NULL,
        tier ENUM('free', 'pro', 'enterprise') NOT NULL DEFAULT 'free',
        prefs JSON NULL,
        created_at DATETIME(6) NOT NULL,
        updated_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3)
    ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
    """CREATE TABLE `{db}`.products (
        sku VARCHAR(32) NOT NULL PRIMARY KEY,
        title VARCHAR(200) NOT NULL,
        price DECIMAL(10,2) NOT NULL,
        stock INT NOT NULL,
        photo BLOB NULL,
        weight_grams MEDIUMINT UNSIGNED NULL
    ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
    """CREATE TABLE `{db}`.orders (
        id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
        customer_id BIGINT UNSIGNED NOT NULL,
        status ENUM('new', 'paid', 'shipped', 'cancelled') NOT NULL,
        total DECIMAL(12,2) NOT NULL,
        placed_at DATETIME(6) NOT NULL,
        note TEXT NULL
    ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
    """CREATE TABLE `{db}`.order_items (
        order_id BIGINT NOT NULL,
        line_no SMALLINT NOT NULL,
        sku VARCHAR(32) NOT NULL,
        qty INT NOT NULL,
        unit_price DECIMAL(10,2) NOT NULL,
        PRIMARY KEY (order_id, line_no)
    ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
)

_NAMES = ("Zoë", "Łukasz", "Ngozi", "Søren", "Aiko", "José", "Иван", "محمد", "李雷", "Ana")


def create_shop_schema(conn: Any, db: str) -> None:
    """Create database ``db`` with the four shop tables (drops an existing one first)."""
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
        cur.execute(f"CREATE DATABASE `{db}` DEFAULT CHARSET utf8mb4")
        for statement in SHOP_SCHEMA:
            cur.execute(statement.format(db=db))


@dataclass
class ShopWorkload:
    """Write a random but reproducible mix of shop transactions.

    :param connect: returns a new pymysql connection (autocommit off is set by the workload).
    :param db: database holding the shop tables.
    :param seed: random seed (the same seed writes the same sequence of statements).
    :param first_number: number of the first transaction, from which new keys are made: a second
        workload on the same database needs a range of its own (say ``1_000_000``).
    """

    connect: Any
    db: str
    seed: int = 7
    first_number: int = 0
    counts: Counter[str] = field(default_factory=Counter)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    error: BaseException | None = None

    def run(self, transactions: int) -> Counter[str]:
        """Write ``transactions`` transactions synchronously; return counts per kind."""
        conn = self.connect()
        rng = random.Random(self.seed)
        try:
            conn.autocommit(False)
            for number in range(transactions):
                if self._stop.is_set():
                    break
                self._transaction(conn, rng, number)
        finally:
            conn.close()
        return self.counts

    def start(self, transactions: int, pause_seconds: float = 0.0) -> None:
        """Write in a background thread until ``transactions`` are done or :meth:`stop` is called."""

        def target() -> None:
            try:
                conn = self.connect()
            except BaseException as err:  # surfaced by stop()
                self.error = err
                return
            try:
                rng = random.Random(self.seed)
                conn.autocommit(False)
                for number in range(transactions):
                    if self._stop.is_set():
                        break
                    self._transaction(conn, rng, number)
                    if pause_seconds:
                        time.sleep(pause_seconds)
            except BaseException as err:  # surfaced by stop()
                self.error = err
            finally:
                conn.close()  # an open transaction would hold its locks until the server's timeout

        self._thread = threading.Thread(target=target, name="shop-workload", daemon=True)
        self._thread.start()

    def stop(self) -> Counter[str]:
        """Stop the background writer, wait for it and return the counts.

        :raises RuntimeError: when the writer failed.
        """
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.error is not None:
            raise RuntimeError(f"the workload failed: {self.error}") from self.error
        return self.counts

    def _transaction(self, conn: Any, rng: random.Random, number: int) -> None:
        kinds = (
            "new_customer",
            "new_product",
            "order",
            "update_customer",
            "price_change",
            "cancel",
            "rekey",
            "delete_items",
        )
        kind = kinds[0] if number < 5 else kinds[1] if number < 10 else rng.choice(kinds)
        with conn.cursor() as cur:
            getattr(self, f"_{kind}")(cur, rng, self.first_number + number)
        conn.commit()
        self.counts[kind] += 1

    def _new_customer(self, cur: Any, rng: random.Random, number: int) -> None:
        prefs = json.dumps(
            {"lang": rng.choice(["en", "fr", "ja"]), "tags": [rng.randint(1, 9)]}, ensure_ascii=False
        )
        cur.execute(
            f"INSERT INTO `{self.db}`.customers (id, email, name, tier, prefs, created_at) "
            "VALUES (%s, %s, %s, %s, %s, NOW(6))",
            (
                2**63 + number * 7919 + rng.randint(0, 7918),
                f"user{number}@example.com",
                f"{rng.choice(_NAMES)} {number} 🛒",
                rng.choice(["free", "pro", "enterprise"]),
                prefs if rng.random() < 0.8 else None,
            ),
        )

    def _new_product(self, cur: Any, rng: random.Random, number: int) -> None:
        cur.execute(
            f"INSERT INTO `{self.db}`.products (sku, title, price, stock, photo, weight_grams) VALUES (%s, %s, %s, %s, %s, %s)",
            (
                f"SKU-{number:06d}",
                f"Product {number} — {rng.choice(_NAMES)}",
                f"{rng.randint(100, 99999) / 100:.2f}",
                rng.randint(0, 500),
                bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 64))) if rng.random() < 0.7 else None,
                rng.randint(1, 16_000_000),
            ),
        )

    def _pick(self, cur: Any, rng: random.Random, table: str, key: str) -> Any:
        cur.execute(
            f"SELECT {key} FROM `{self.db}`.{table} ORDER BY {key} LIMIT 1 OFFSET %s", (rng.randint(0, 20),)
        )
        row = cur.fetchone()
        return None if row is None else row[0]

    def _order(self, cur: Any, rng: random.Random, number: int) -> None:
        customer = self._pick(cur, rng, "customers", "id")
        if customer is None:
            return self._new_customer(cur, rng, number)
        cur.execute(
            f"INSERT INTO `{self.db}`.orders (customer_id, status, total, placed_at, note) VALUES (%s, 'new', 0, NOW(6), %s)",
            (customer, rng.choice([None, "gift wrap 🎁", "leave at door"])),
        )
        order_id = cur.lastrowid
        total = 0.0
        for line in range(1, rng.randint(2, 5)):
            sku = self._pick(cur, rng, "products", "sku")
            if sku is None:
                break
            qty = rng.randint(1, 4)
            cur.execute(f"SELECT price FROM `{self.db}`.products WHERE sku = %s", (sku,))
            price = float(cur.fetchone()[0])
            total += qty * price
            cur.execute(
                f"INSERT INTO `{self.db}`.order_items VALUES (%s, %s, %s, %s, %s)",
                (order_id, line, sku, qty, f"{price:.2f}"),
            )
            cur.execute(f"UPDATE `{self.db}`.products SET stock = stock - %s WHERE sku = %s", (qty, sku))
        cur.execute(
            f"UPDATE `{self.db}`.orders SET total = %s, status = 'paid' WHERE id = %s",
            (f"{total:.2f}", order_id),
        )

    def _update_customer(self, cur: Any, rng: random.Random, number: int) -> None:
        customer = self._pick(cur, rng, "customers", "id")
        if customer is not None:
            cur.execute(
                f"UPDATE `{self.db}`.customers SET tier = %s, prefs = JSON_SET(COALESCE(prefs, '{{}}'), '$.n', %s) "
                "WHERE id = %s",
                (rng.choice(["free", "pro", "enterprise"]), number, customer),
            )

    def _price_change(self, cur: Any, rng: random.Random, number: int) -> None:
        cur.execute(
            f"UPDATE `{self.db}`.products SET price = price * %s WHERE sku LIKE %s",
            (f"{rng.uniform(0.9, 1.1):.4f}", f"SKU-00000{rng.randint(0, 9)}%"),
        )

    def _cancel(self, cur: Any, rng: random.Random, number: int) -> None:
        order_id = self._pick(cur, rng, "orders", "id")
        if order_id is not None:
            cur.execute(
                f"UPDATE `{self.db}`.orders SET status = 'cancelled', note = NULL WHERE id = %s", (order_id,)
            )
            cur.execute(f"DELETE FROM `{self.db}`.order_items WHERE order_id = %s", (order_id,))

    def _rekey(self, cur: Any, rng: random.Random, number: int) -> None:
        sku = self._pick(cur, rng, "products", "sku")
        if sku is not None:
            cur.execute(
                f"UPDATE `{self.db}`.order_items SET sku = %s WHERE sku = %s", (f"R{number}-{sku[-20:]}", sku)
            )
            cur.execute(
                f"UPDATE `{self.db}`.products SET sku = %s WHERE sku = %s", (f"R{number}-{sku[-20:]}", sku)
            )

    def _delete_items(self, cur: Any, rng: random.Random, number: int) -> None:
        cur.execute(
            f"DELETE FROM `{self.db}`.order_items ORDER BY order_id, line_no LIMIT %s", (rng.randint(1, 3),)
        )
        if rng.random() < 0.3:
            cur.execute(f"DELETE FROM `{self.db}`.customers ORDER BY created_at DESC LIMIT 1")
