"""Who may do what in a PostgreSQL queue: the database says, not the client.

Schema 2 of pgstore.py. Three group roles (NOLOGIN; a person's or a machine's login role
is made a member of one, docs/guides/queue.md says how):

    podctl_user    adds entries; sees, changes and cancels only its own (row-level
                   security); reads quotas and teams
    podctl_ticker  `queue tick`: sees and advances every entry; registers its key for
                   the sealed `--env` values (sealing.py)
    podctl_admin   all of that, and quotas, teams, `queue migrate`, others' entries

The owner of the podctl schema (the role that made it) and superusers count as admins.

  - An entry's owner is `session_user`, the role that connected: a column default and
    a trigger that overrides what the client sent (an admin's `queue migrate` keeps the
    owners it moves). Nobody but an admin changes an owner.
  - A plain user's change to an own entry may only cancel it or record what the cancel
    did; its request (slice, script, env, priority, budget) is fixed once added.
  - Every state change is written to `podctl.events` by a trigger, with `session_user`
    as who made it; only the trigger writes there (SECURITY DEFINER), so the record is
    the database's. `queue show` prints it.
  - Quotas hold finite numbers, 0 or more (a CHECK: NaN would pass every comparison).
"""

from __future__ import annotations

from typing import Any

USER, TICKER, ADMIN = "podctl_user", "podctl_ticker", "podctl_admin"
ROLES = (USER, TICKER, ADMIN)
# the request of an entry, fixed once added (for anyone but a ticker or an admin)
REQUEST_V2 = ("name", "accelerator_type", "project", "zone", "bucket", "script", "bundle_hash",
              "args", "env", "priority", "tier", "valid_for", "max_hours", "max_cost",
              "max_attempts", "created")
REQUEST_V3 = (*REQUEST_V2, "via")  # schema 3: `queue add --via` is the request's too
# schema 4: `queue add --num-slices K --elastic` (and its floor and deadline) too
REQUEST = (*REQUEST_V3, "num_slices", "elastic", "min_slices", "grow_deadline")


def _guard(columns: tuple[str, ...]) -> str:
    """The trigger function that keeps an entry's request (COLUMNS) as it was added, its
    owner the adder's, and its state the tickers' (a user may cancel)."""
    return f"""
CREATE OR REPLACE FUNCTION podctl.entry_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    IF NEW.owner IS NULL OR NEW.owner = '' OR NOT podctl.is_admin() THEN
      NEW.owner := session_user;
    END IF;
    RETURN NEW;
  END IF;
  IF NEW.owner IS DISTINCT FROM OLD.owner AND NOT podctl.is_admin() THEN
    RAISE EXCEPTION 'only a {ADMIN} changes the owner of an entry' USING ERRCODE = '42501';
  END IF;
  IF NOT podctl.is_ticker() THEN
    IF NEW.state <> OLD.state AND NEW.state <> 'cancelled' THEN
      RAISE EXCEPTION 'role % may cancel entry % but not move it to %; the tickers do',
        session_user, OLD.id, NEW.state USING ERRCODE = '42501';
    END IF;
    IF ({', '.join(f'NEW.{c}' for c in columns)}) IS DISTINCT FROM
       ({', '.join(f'OLD.{c}' for c in columns)}) THEN
      RAISE EXCEPTION 'entry % was added as it is: only a {ADMIN} changes it', OLD.id
        USING ERRCODE = '42501';
    END IF;
  END IF;
  RETURN NEW;
END $$;
"""


_FUNCTIONS = f"""
CREATE FUNCTION podctl.is_admin() RETURNS boolean LANGUAGE sql STABLE AS $$
  SELECT pg_has_role(session_user, '{ADMIN}', 'MEMBER')
      OR coalesce((SELECT rolsuper FROM pg_roles WHERE rolname = session_user), false)
      OR pg_has_role(session_user, (SELECT nspowner FROM pg_namespace WHERE nspname = 'podctl'),
                     'MEMBER') $$;
CREATE FUNCTION podctl.is_ticker() RETURNS boolean LANGUAGE sql STABLE AS $$
  SELECT pg_has_role(session_user, '{TICKER}', 'MEMBER') OR podctl.is_admin() $$;

{_guard(REQUEST_V2)}
CREATE FUNCTION podctl.entry_event() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
  SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF TG_OP = 'UPDATE' AND NEW.state = OLD.state THEN
    RETURN NULL;
  END IF;
  INSERT INTO podctl.events (entry, owner, actor, from_state, to_state, reason)
    VALUES (NEW.id, NEW.owner, session_user,
            CASE WHEN TG_OP = 'UPDATE' THEN OLD.state END, NEW.state,
            CASE WHEN NEW.state <> 'pending' THEN NEW.last_error END);
  RETURN NULL;
END $$;
"""


def _create_roles(cur: Any) -> None:
    """The group roles are the cluster's (one set for every database in it): made once,
    by a migrator with CREATEROLE; a database admin may make them beforehand."""
    for role in ROLES:
        cur.execute(f"""DO $$ BEGIN
            IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{role}') THEN
              CREATE ROLE {role} NOLOGIN;
            END IF;
          EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;  -- another made it
          END $$""")


def v3(cur: Any) -> None:
    """`queue add --via`: a column, and the request's guard made again to hold it."""
    cur.execute("ALTER TABLE podctl.entries ADD COLUMN via TEXT")
    cur.execute(_guard(REQUEST_V3))


def v4(cur: Any) -> None:
    """`queue add --num-slices K --elastic`: columns (an old entry is one slice, not
    elastic), and the request's guard made again to hold them."""
    cur.execute("ALTER TABLE podctl.entries ADD COLUMN num_slices BIGINT NOT NULL DEFAULT 1, "
                "ADD COLUMN elastic BOOLEAN NOT NULL DEFAULT false, ADD COLUMN min_slices BIGINT, "
                "ADD COLUMN grow_deadline DOUBLE PRECISION")
    cur.execute(_guard(REQUEST))


def v2(cur: Any) -> None:
    _create_roles(cur)
    cur.execute(_FUNCTIONS)
    cur.execute("""CREATE TABLE podctl.events (
        id BIGSERIAL PRIMARY KEY, entry BIGINT NOT NULL, owner TEXT NOT NULL,
        at TIMESTAMPTZ NOT NULL DEFAULT now(), actor TEXT NOT NULL,
        from_state TEXT, to_state TEXT NOT NULL, reason TEXT)""")
    cur.execute("CREATE INDEX events_entry ON podctl.events (entry, id)")
    cur.execute("""CREATE TABLE podctl.ticker_keys (
        key_id TEXT PRIMARY KEY, role TEXT NOT NULL DEFAULT session_user,
        public_key TEXT NOT NULL, added TIMESTAMPTZ NOT NULL DEFAULT now())""")
    cur.execute("ALTER TABLE podctl.entries ALTER COLUMN owner SET DEFAULT session_user")
    cur.execute("CREATE TRIGGER entries_guard BEFORE INSERT OR UPDATE ON podctl.entries "
                "FOR EACH ROW EXECUTE FUNCTION podctl.entry_guard()")
    cur.execute("CREATE TRIGGER entries_event AFTER INSERT OR UPDATE OF state ON podctl.entries "
                "FOR EACH ROW EXECUTE FUNCTION podctl.entry_event()")
    # existing rows first: a NaN or a negative quota from before is no quota
    cur.execute("DELETE FROM podctl.quotas WHERE chip_hours_week = 'NaN' OR chip_hours_week < 0 "
                "OR chip_hours_week = 'Infinity' OR max_chips < 0")
    cur.execute("ALTER TABLE podctl.quotas ADD CONSTRAINT quotas_finite CHECK "
                "(chip_hours_week >= 0 AND chip_hours_week < 'Infinity' AND max_chips >= 0)")
    # (SELECT f()): evaluated once per statement, not once per row
    anyone = "owner = session_user OR (SELECT podctl.is_ticker())"
    for table, see, write in (
            ("entries", anyone, anyone),
            ("events", anyone, "false"),
            ("ticker_keys", "true", "role = session_user AND (SELECT podctl.is_ticker())")):
        cur.execute(f"ALTER TABLE podctl.{table} ENABLE ROW LEVEL SECURITY")
        cur.execute(f"CREATE POLICY {table}_see ON podctl.{table} FOR SELECT USING ({see})")
        cur.execute(f"CREATE POLICY {table}_add ON podctl.{table} FOR INSERT WITH CHECK ({write})")
        cur.execute(f"CREATE POLICY {table}_change ON podctl.{table} FOR UPDATE USING ({write})")
    # a ticker machine gone for good: an admin removes its key, and new entries are not sealed to it
    cur.execute("CREATE POLICY ticker_keys_remove ON podctl.ticker_keys FOR DELETE USING ((SELECT podctl.is_admin()))")
    every = ", ".join(ROLES)
    cur.execute(f"GRANT USAGE ON SCHEMA podctl TO {every}")
    cur.execute(f"GRANT SELECT ON podctl.meta, podctl.quotas, podctl.teams, podctl.events, "
                f"podctl.ticker_keys TO {every}")
    cur.execute(f"GRANT SELECT, INSERT, UPDATE ON podctl.entries TO {every}")
    cur.execute(f"GRANT USAGE ON SEQUENCE podctl.entries_id_seq TO {every}")
    cur.execute(f"GRANT INSERT, UPDATE ON podctl.ticker_keys TO {TICKER}, {ADMIN}")
    cur.execute(f"GRANT INSERT, UPDATE, DELETE ON podctl.quotas, podctl.teams TO {ADMIN}")
    cur.execute(f"GRANT DELETE ON podctl.ticker_keys TO {ADMIN}")
    cur.execute(f"GRANT UPDATE ON podctl.meta TO {ADMIN}")
    cur.execute(f"GRANT UPDATE ON SEQUENCE podctl.entries_id_seq TO {ADMIN}")
