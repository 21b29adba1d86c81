-- Bulk load, index, query, update and delete in SQLite, for the sqlite3 shell.
--
-- Run as: sqlite3 -batch :memory: < bulk.sql   (after replacing @ROWS@)
--
-- The database is in memory: every page lives in SQLite's page cache, which
-- takes it from malloc, so the allocator sees the whole working set (about
-- 100 bytes of table and index per row) rather than the kernel's file cache.
-- @ROWS@ orders are generated inside SQL by a recursive CTE that carries a
-- 31-bit LCG as its state (no random(): that is seeded from the OS), in one
-- transaction, with @ROWS@/10 customers and 500 products. Then: three
-- indexes, joins with GROUP BY aggregates, an ORDER BY ... LIMIT over a
-- computed text column (a full sort), a window function, an UPDATE of a
-- seventh and a DELETE of a tenth of the orders, a VACUUM (which rebuilds the
-- database into fresh pages), and PRAGMA integrity_check, which prints ok.
--
-- Every printed row is ordered by a unique key and holds integers and text
-- only (sums of integer cents, counts; no floating-point columns), so the
-- output depends on @ROWS@ only.
.bail on
.headers off
.mode list
PRAGMA cache_size = -262144;

CREATE TABLE customer (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  region INTEGER NOT NULL,
  since INTEGER NOT NULL
);
CREATE TABLE product (
  id INTEGER PRIMARY KEY,
  label TEXT NOT NULL,
  price INTEGER NOT NULL
);
CREATE TABLE orders (
  id INTEGER PRIMARY KEY,
  customer INTEGER NOT NULL REFERENCES customer(id),
  product INTEGER NOT NULL REFERENCES product(id),
  qty INTEGER NOT NULL,
  status TEXT NOT NULL,
  note TEXT NOT NULL,
  seed INTEGER NOT NULL
);

BEGIN;
INSERT INTO product (id, label, price)
  WITH RECURSIVE g(i, x) AS (
    SELECT 1, 7919
    UNION ALL
    SELECT i + 1, (x * 1103515245 + 12345) % 2147483648 FROM g WHERE i < 500
  )
  SELECT i, 'product-' || i || '-' || substr('abcdefghijklmnopqrstuvwxyz', 1 + x % 26, 1 + x % 7),
         100 + (x / 65536) % 20000
  FROM g;
INSERT INTO customer (id, name, region, since)
  WITH RECURSIVE g(i, x) AS (
    SELECT 1, 104729
    UNION ALL
    SELECT i + 1, (x * 1103515245 + 12345) % 2147483648 FROM g WHERE i < max(1, @ROWS@ / 10)
  )
  SELECT i, 'customer ' || printf('%06d', i) || ' ' || printf('%04x', x % 65536), (x / 65536) % 12,
         20000101 + (x / 256) % 300000
  FROM g;
INSERT INTO orders (id, customer, product, qty, status, note, seed)
  WITH RECURSIVE g(i, x) AS (
    SELECT 1, 1299709
    UNION ALL
    SELECT i + 1, (x * 1103515245 + 12345) % 2147483648 FROM g WHERE i < @ROWS@
  )
  SELECT i,
         1 + (x / 16) % max(1, @ROWS@ / 10),
         1 + (x / 128) % 500,
         1 + (x / 4096) % 9,
         CASE (x / 8192) % 5 WHEN 0 THEN 'new' WHEN 1 THEN 'paid' WHEN 2 THEN 'packed'
                             WHEN 3 THEN 'shipped' ELSE 'returned' END,
         'note ' || (x % 1000) || ' ' || substr('lorem ipsum dolor sit amet consectetur adipiscing elit',
                                                1 + (x / 1024) % 30, 8 + (x / 32) % 24),
         x
  FROM g;
COMMIT;

CREATE INDEX orders_customer ON orders (customer);
CREATE INDEX orders_status_product ON orders (status, product);
CREATE INDEX customer_region ON customer (region, id);

SELECT 'loaded', (SELECT count(*) FROM customer), (SELECT count(*) FROM product),
       count(*), sum(qty), sum(seed % 1000003) FROM orders;

-- Revenue per region: a three-way join, grouped.
SELECT 'region', c.region, count(*), sum(o.qty * p.price)
  FROM orders o JOIN customer c ON c.id = o.customer JOIN product p ON p.id = o.product
  GROUP BY c.region ORDER BY c.region;

-- Orders per status, through the (status, product) index.
SELECT 'status', status, count(*), sum(qty) FROM orders GROUP BY status ORDER BY status;

-- The ten best customers: a join, a GROUP BY over many groups, then a sort.
SELECT 'top', c.id, c.name, count(*), sum(o.qty * p.price) AS total
  FROM orders o JOIN customer c ON c.id = o.customer JOIN product p ON p.id = o.product
  GROUP BY c.id ORDER BY total DESC, c.id LIMIT 10;

-- A full sort on a computed text key, then a limit.
SELECT 'sorted', id, upper(substr(note, 6)) || '#' || customer AS k
  FROM orders ORDER BY k, id LIMIT 5;

-- A window function over the products: rank by revenue inside each price band.
SELECT 'band', band, id, rnk FROM (
  SELECT p.price / 5000 AS band, p.id AS id,
         rank() OVER (PARTITION BY p.price / 5000 ORDER BY sum(o.qty) * p.price DESC, p.id) AS rnk
    FROM orders o JOIN product p ON p.id = o.product GROUP BY p.id
) WHERE rnk <= 2 ORDER BY band, rnk, id;

-- Change a seventh, delete a tenth (both spread over the whole table).
BEGIN;
UPDATE orders SET status = 'shipped', qty = qty + 1, note = note || ' (updated)' WHERE seed % 7 = 3;
DELETE FROM orders WHERE seed % 10 = 4;
DELETE FROM customer WHERE id NOT IN (SELECT customer FROM orders);
COMMIT;

SELECT 'after', (SELECT count(*) FROM customer), count(*), sum(qty), sum(length(note)) FROM orders;
SELECT 'status', status, count(*), sum(qty) FROM orders GROUP BY status ORDER BY status;
SELECT 'orphans', count(*) FROM orders o LEFT JOIN customer c ON c.id = o.customer WHERE c.id IS NULL;

VACUUM;
PRAGMA integrity_check;
