r"""The privileges a pipeline's user needs on the source, read from ``SHOW GRANTS``, with the fixes.

``SHOW GRANTS`` answers with the ``GRANT`` statements that would recreate an account's privileges (MariaDB
KB, "SHOW GRANTS"; MySQL manual, "SHOW GRANTS Statement"); no privilege is needed to see one's own. This
module parses those lines with a small parser of its own (sqlglot 30 parses MySQL ``GRANT`` statements
only as an opaque ``Command``) and decides, per privilege the pipeline needs, whether a grant covers it
and, if not, which ``GRANT ... TO 'user'@'host'`` statement adds it. It imports nothing from Airflow.

What the parser understands (the shapes both servers print; MariaDB KB, "GRANT"; MySQL manual, "GRANT
Statement"):

- ``GRANT <privilege>[ (<columns>)][, ...] ON [TABLE] <level> TO <grantee> [IDENTIFIED BY ...] [WITH ...]``
  where ``<level>`` is ``*.*`` (global), ``db.*`` (database; ``%`` and ``_`` in the name are ``LIKE``
  wildcards and ``\_`` a literal underscore) or ``db.table``; ``ALL [PRIVILEGES]`` stands for every
  privilege of its level. Column grants cover only their columns and so never a whole table.
- ``GRANT <role>[, ...] TO <grantee>``: roles granted to the user or to another role.
- ``REVOKE <privilege>[, ...] ON db.* FROM <grantee>``: MySQL's partial revokes (``partial_revokes=ON``)
  take a global privilege back for one database.
- Routine grants (``ON PROCEDURE``/``FUNCTION``/``PACKAGE``), ``GRANT PROXY`` and ``SET DEFAULT ROLE``
  lines grant nothing the pipeline uses and are skipped.

Which privileges, by flavor (MariaDB KB, "GRANT", section "Global Privileges"; MySQL manual, "Privileges
Provided by MySQL"):

- Streaming the binlog (``COM_BINLOG_DUMP``: extract windows, sensor probes): ``REPLICATION SLAVE`` on
  both (MariaDB 10.5.1+ also spells it ``REPLICATION REPLICA``).
- Reading the binlog head and files (``SHOW BINLOG STATUS`` / ``SHOW MASTER STATUS``, ``SHOW BINARY
  LOGS``; every task and sensor): MariaDB 10.5.2+ ``BINLOG MONITOR``, which is the new name of
  ``REPLICATION CLIENT`` (the old name stays an alias); MySQL ``REPLICATION CLIENT`` (or the deprecated
  ``SUPER``). MariaDB 10.5 also split ``REPLICATION SLAVE ADMIN`` (START/STOP REPLICA), ``SLAVE MONITOR``
  (SHOW REPLICA STATUS) and ``REPLICATION MASTER ADMIN`` (SHOW REPLICA HOSTS) off ``SUPER``; the pipeline
  needs none of them (the last one only to compare its server_id with registered replicas).
- Describing and snapshotting the selected tables: ``SELECT`` on each table, or on its database when the
  selection is a pattern: ``information_schema`` shows a user only the tables it holds a privilege on, so
  a pattern such as ``shop.*`` would silently miss the tables it may not read.

A MariaDB session starts with its account's default role only (MariaDB KB, "SET DEFAULT ROLE"), a MySQL
session with the roles of ``SET DEFAULT ROLE`` / ``activate_all_roles_on_login`` (MySQL manual, "Using
Roles"); the pipeline's connections never run ``SET ROLE``, so the privileges of other granted roles do not
count and the advice names ``SET DEFAULT ROLE`` for them.

Over 500 lines because the ``SHOW GRANTS`` parser, the privilege models and the verdicts are one concept
(what a grant line covers decides the verdict and its fix), each part documented with its sources.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from airflow_provider_binlog.contract.names import TablePattern
from airflow_provider_binlog.source.findings import Finding, Outcome
from airflow_provider_binlog.source.sql import quote_identifier, quote_string

ACCESS_DENIED_ERRORS = frozenset({1044, 1045, 1142, 1143, 1227, 1370, 1698})
"""Server errors meaning the account lacks a privilege or may not log in: 1044 ER_DBACCESS_DENIED_ERROR,
1045 ER_ACCESS_DENIED_ERROR, 1142 ER_TABLEACCESS_DENIED_ERROR, 1143 ER_COLUMNACCESS_DENIED_ERROR, 1227
ER_SPECIFIC_ACCESS_DENIED_ERROR, 1370 ER_PROCACCESS_DENIED_ERROR, 1698 ER_ACCESS_DENIED_NO_PASSWORD_ERROR
(MySQL manual, "Server Error Message Reference"; MariaDB KB, "MariaDB Error Code Reference")."""

_TOKEN = re.compile(
    r"""\s*(?:(?P<quoted>`(?:[^`]|``)*`)|(?P<string>'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*")"""
    r"""|(?P<word>[A-Za-z0-9_$]+)|(?P<punct>\S))"""
)
_ROUTINE_OBJECTS = frozenset({"PROCEDURE", "FUNCTION", "PACKAGE"})
ALL = "ALL"


@dataclass(frozen=True)
class Token:
    """A token of a ``SHOW GRANTS`` line: ``kind`` is ``quoted``, ``string``, ``word`` or ``punct``."""

    kind: str
    text: str

    @property
    def value(self) -> str:
        """Return the text without quotes (doubled quotes undone), or the word in upper case."""
        if self.kind == "quoted":
            return self.text[1:-1].replace("``", "`")
        if self.kind == "string":
            quote = self.text[0]
            return re.sub(r"\\(.)", r"\1", self.text[1:-1].replace(quote * 2, quote))
        return self.text.upper() if self.kind == "word" else self.text

    def is_word(self, *words: str) -> bool:
        """Return True when the token is one of the unquoted keywords ``words``."""
        return self.kind == "word" and self.text.upper() in words


def tokenize(text: str) -> list[Token]:
    """Split a ``SHOW GRANTS`` line into tokens (identifiers, strings, words, punctuation)."""
    tokens = []
    for match in _TOKEN.finditer(text):
        kind = match.lastgroup
        if kind is not None:
            tokens.append(Token(kind, match.group(kind)))
    return tokens


@dataclass(frozen=True)
class Grant:
    """Privileges on one level, granted (or, for a partial revoke, taken back) by one line.

    :param privileges: upper-case privilege names; ``ALL`` for ``ALL [PRIVILEGES]``.
    :param database: None for ``*.*``; else the database name, a ``LIKE`` pattern at database level.
    :param table: None for ``db.*`` and ``*.*``; else the table name.
    :param grantee: the account or role it was granted to (``user@host`` or ``role``).
    :param columns: True for a column grant (covers only its columns).
    :param revoke: True for a ``REVOKE`` line (a MySQL partial revoke).
    """

    privileges: frozenset[str]
    database: str | None
    table: str | None
    grantee: str
    columns: bool = False
    revoke: bool = False

    def covers(self, privilege: str, database: str | None, table: str | None) -> bool:
        """Return True when this grant gives ``privilege`` on ``database``.``table`` (None: the level above).

        A global grant covers every level; a database grant covers its databases and their tables; a
        table grant covers its table only, and a column grant nothing whole.
        """
        if self.columns or not (privilege in self.privileges or ALL in self.privileges):
            return False
        if self.database is None:
            return True
        if database is None or not like_matches(self.database, database):
            return False
        if self.table is None:
            return True
        return table is not None and self.database == database and self.table == table


@dataclass(frozen=True)
class RoleGrant:
    """A ``GRANT role[, ...] TO grantee`` line: ``roles`` granted to ``grantee`` (``user@host`` or a role)."""

    roles: tuple[str, ...]
    grantee: str


def like_matches(pattern: str, name: str) -> bool:
    r"""Return True when database ``name`` matches the database-level grant name ``pattern``.

    In database-level grants ``%`` matches any run of characters and ``_`` any one character; ``\`` makes
    the next character literal (MySQL manual, "GRANT Statement", "Object Quoting Guidelines"; MariaDB KB,
    "GRANT", "Database Privileges").
    """
    regex = []
    chars = iter(pattern)
    for char in chars:
        if char == "\\":
            regex.append(re.escape(next(chars, "\\")))
        elif char == "%":
            regex.append(".*")
        elif char == "_":
            regex.append(".")
        else:
            regex.append(re.escape(char))
    return re.fullmatch("".join(regex), name, re.DOTALL) is not None


def _account(tokens: Sequence[Token]) -> str:
    """Return ``user@host`` (or ``role``) from the tokens of a grantee."""
    names = [t.text if t.kind == "word" else t.value for t in tokens if t.kind != "punct"]
    return "@".join(names[:2])


def _split(tokens: Sequence[Token]) -> list[list[Token]]:
    """Split tokens at commas outside parentheses."""
    parts: list[list[Token]] = [[]]
    depth = 0
    for token in tokens:
        if token.text == "(":
            depth += 1
        elif token.text == ")":
            depth -= 1
        if token.text == "," and depth == 0:
            parts.append([])
        else:
            parts[-1].append(token)
    return parts


def parse_grant(line: str) -> Grant | RoleGrant | None:
    """Parse one line of ``SHOW GRANTS``; None for lines that grant nothing the pipeline uses.

    :raises ValueError: when the line is a ``GRANT``/``REVOKE`` of a shape this parser does not know.
    """
    tokens = tokenize(line)
    if not tokens or not tokens[0].is_word("GRANT", "REVOKE"):
        return None  # SET DEFAULT ROLE ...
    revoke = tokens[0].is_word("REVOKE")
    target = next((i for i, t in enumerate(tokens) if t.is_word("TO", "FROM")), None)
    on = next((i for i, t in enumerate(tokens[:target]) if t.is_word("ON")), None)
    if target is None:
        raise ValueError(f"cannot parse the grant {line!r}: no TO/FROM")
    end = next(
        (
            i
            for i in range(target + 1, len(tokens))
            if tokens[i].is_word("IDENTIFIED", "WITH", "REQUIRE", "AS")
        ),
        len(tokens),
    )
    grantee = _account(tokens[target + 1 : end])
    if on is None:  # GRANT role, ... TO grantee
        roles = tuple(_account(part) for part in _split(tokens[1:target]) if part)
        return None if revoke else RoleGrant(roles=roles, grantee=grantee)
    privileges, columns = set(), False
    for part in _split(tokens[1:on]):
        words = [t.value for t in part if t.kind == "word"]
        paren = next((i for i, t in enumerate(part) if t.text == "("), None)
        if paren is not None:
            columns = True
            words = [t.value for t in part[:paren] if t.kind == "word"]
        name = " ".join(words)
        privileges.add(ALL if name in ("ALL", "ALL PRIVILEGES") else name)
    if "PROXY" in privileges:
        return None
    level = list(tokens[on + 1 : target])
    if level and level[0].is_word(*_ROUTINE_OBJECTS):
        return None
    if level and level[0].is_word("TABLE"):
        level = level[1:]
    texts = [t.text for t in level]
    if texts == ["*", ".", "*"] or texts == ["*"]:
        database, table = None, None
    elif len(level) == 3 and texts[1] == ".":
        database = level[0].value
        table = None if texts[2] == "*" and level[2].kind == "punct" else level[2].value
    else:
        raise ValueError(f"cannot parse the grant {line!r}: unknown level {' '.join(texts)!r}")
    return Grant(
        privileges=frozenset(privileges),
        database=database,
        table=table,
        grantee=grantee,
        columns=columns,
        revoke=revoke,
    )


def parse_role_list(text: str) -> list[str]:
    """Return the roles of a ``CURRENT_ROLE()`` value: MariaDB ``role`` or NULL, MySQL ```r`@`%`,...`` or ``NONE``."""
    if not text or text.upper() == "NONE":
        return []
    if "`" not in text:
        return [text]  # MariaDB: the role's name as is
    return [_account(part) for part in _split(tokenize(text)) if part]


@dataclass(frozen=True)
class Requirement:
    """A privilege the pipeline needs on one level, and what it is for.

    :param privilege: the name to grant.
    :param accepted: every name that satisfies it (aliases, ``ALL``).
    :param database: None for a global privilege.
    :param table: None for a global or database-level privilege.
    :param purpose: what fails without it.
    """

    privilege: str
    accepted: tuple[str, ...]
    database: str | None
    table: str | None
    purpose: str

    @property
    def level(self) -> str:
        """Return the level as ``GRANT`` writes it: ``*.*``, ```db`.*`` or ```db`.`table```."""
        if self.database is None:
            return "*.*"
        db = quote_identifier(self.database.replace("\\", "\\\\").replace("_", "\\_").replace("%", "\\%"))
        return (
            f"{db}.*"
            if self.table is None
            else f"{quote_identifier(self.database)}.{quote_identifier(self.table)}"
        )

    def __str__(self) -> str:
        return f"{self.privilege} ON {self.level}"


@dataclass(frozen=True)
class PrivilegeModel:
    """The privilege names and statements of one server flavor (MySQL or MariaDB).

    :param name: ``mysql`` or ``mariadb``.
    :param binlog_stream: names of the privilege to stream the binlog.
    :param binlog_monitor: names of the privilege to read the binlog head and file list.
    :param list_replicas: the privilege ``SHOW REPLICAS`` / ``SHOW SLAVE HOSTS`` needs.
    :param default_role_statement: ``SET DEFAULT ROLE`` statement template (``{role}``, ``{account}``).
    """

    name: str
    binlog_stream: tuple[str, ...]
    binlog_monitor: tuple[str, ...]
    list_replicas: str
    default_role_statement: str

    def requirements(self, tables: Iterable[tuple[str, str | None]] = ()) -> list[Requirement]:
        """Return what the pipeline needs: the global replication privileges, then SELECT per table.

        :param tables: ``(database, table)`` pairs; table None for every table of the database.
        """
        needs = [
            Requirement(
                self.binlog_stream[0],
                (*self.binlog_stream, ALL),
                None,
                None,
                "streams the binlog (extract windows, sensor probes)",
            ),
            Requirement(
                self.binlog_monitor[0],
                (*self.binlog_monitor, ALL),
                None,
                None,
                "reads the binlog head and files (SHOW BINLOG STATUS / SHOW MASTER STATUS, SHOW BINARY LOGS) "
                "in every task and sensor",
            ),
        ]
        for database, table in tables:
            purpose = (
                "describes and snapshots the table"
                if table is not None
                else f"lets the pattern see every table of {database} (information_schema hides tables the "
                f"user may not read) and snapshots them"
            )
            needs.append(Requirement("SELECT", ("SELECT", ALL), database, table, purpose))
        return needs


MARIADB = PrivilegeModel(
    name="mariadb",
    binlog_stream=("REPLICATION SLAVE", "REPLICATION REPLICA"),
    binlog_monitor=("BINLOG MONITOR", "REPLICATION CLIENT"),
    list_replicas="REPLICATION MASTER ADMIN",
    default_role_statement="SET DEFAULT ROLE {role} FOR {account};",
)
MYSQL = PrivilegeModel(
    name="mysql",
    binlog_stream=("REPLICATION SLAVE",),
    binlog_monitor=("REPLICATION CLIENT", "SUPER"),
    list_replicas="REPLICATION SLAVE",
    default_role_statement="SET DEFAULT ROLE {role} TO {account};",
)
MARIADB_BEFORE_10_5_2 = dataclasses.replace(
    MYSQL, name="mariadb", default_role_statement=MARIADB.default_role_statement
)
"""MariaDB before 10.5.2 had MySQL's replication privileges (no BINLOG MONITOR yet)."""


def privilege_model(flavor: str, version: str) -> PrivilegeModel:
    """Return the privilege model of a server: ``flavor`` (``mysql``/``mariadb``) and ``SELECT VERSION()``."""
    if flavor != "mariadb":
        return MYSQL
    numbers = tuple(int(n) for n in re.findall(r"\d+", version.split("-", 1)[0])[:3])
    return MARIADB if numbers >= (10, 5, 2) else MARIADB_BEFORE_10_5_2


def table_levels(selection: Iterable[str], databases: Iterable[str]) -> list[tuple[str, str | None]]:
    """Return the ``(database, table)`` levels a table selection needs SELECT on (table None: ``db.*``).

    A plain ``db.table`` needs SELECT on that table; a pattern needs it on each database it can match
    (``databases``: the databases the user can see, for patterns over database names).
    """
    known = sorted(set(databases))
    levels: list[tuple[str, str | None]] = []
    for entry in selection:
        if "." not in entry.strip():
            continue
        pattern = TablePattern.parse(entry)
        matched = (
            [db for db in known if pattern.takes_database(db)] if not pattern.db_literal else [pattern.db]
        )
        for database in matched:
            level = (database, pattern.table if pattern.table_literal else None)
            if level not in levels:
                levels.append(level)
    return levels


@dataclass(frozen=True)
class Verdict:
    """Whether one requirement holds.

    :param requirement: the privilege needed.
    :param granted_to: the account or role whose grant covers it; None when missing.
    :param fix: the statement that adds it (empty when it holds).
    """

    requirement: Requirement
    granted_to: str | None
    fix: str = ""

    @property
    def missing(self) -> bool:
        """Return True when no active grant covers the requirement."""
        return self.granted_to is None


@dataclass
class Grants:
    """The grants active in a session of one account, as ``SHOW GRANTS`` lists them.

    :param user: the account's user name (``CURRENT_USER()``).
    :param host: the account's host pattern (``CURRENT_USER()``).
    :param privileges: the server's privilege model.
    :param grants: parsed privilege lines (of the account and its active roles).
    :param roles: roles granted to the account.
    :param active_roles: roles enabled in a new session (the default role and the roles granted to it).
    :param unparsed: ``SHOW GRANTS`` lines the parser did not understand (they count as granting nothing).
    """

    user: str
    host: str
    privileges: PrivilegeModel
    grants: list[Grant] = field(default_factory=list)
    roles: list[str] = field(default_factory=list)
    active_roles: set[str] = field(default_factory=set)
    unparsed: list[str] = field(default_factory=list)

    @classmethod
    def parse(
        cls,
        current_user: str,
        lines: Iterable[str],
        privileges: PrivilegeModel,
        current_roles: Iterable[str] = (),
    ) -> Grants:
        """Build from ``CURRENT_USER()``, the ``SHOW GRANTS`` lines and the session's enabled roles.

        Lines of a shape :func:`parse_grant` does not know are kept in :attr:`unparsed` (and named in the
        advice) rather than guessed at.
        """
        user, _, host = current_user.rpartition("@")
        grants = cls(user=user, host=host, privileges=privileges)
        role_grants = []
        for line in lines:
            try:
                parsed = parse_grant(line)
            except ValueError:
                grants.unparsed.append(line)
                continue
            if isinstance(parsed, Grant):
                grants.grants.append(parsed)
            elif isinstance(parsed, RoleGrant):
                role_grants.append(parsed)
        account = f"{user}@{host}"
        grants.roles = [role for g in role_grants if g.grantee == account for role in g.roles]
        active = {role for role in current_roles if role}
        while True:  # roles granted to active roles are active too
            more = {role for g in role_grants if g.grantee in active for role in g.roles} - active
            if not more:
                break
            active |= more
        grants.active_roles = active
        return grants

    @property
    def account(self) -> str:
        """Return the account as ``GRANT ... TO`` names it: ``'user'@'host'``."""
        return f"{quote_string(self.user)}@{quote_string(self.host)}"

    def granted_to(self, requirement: Requirement) -> str | None:
        """Return who holds ``requirement`` (the account, or the role whose grant covers it); None if nobody."""
        revoked = any(
            g.revoke and g.covers(p, requirement.database, requirement.table)
            for g in self.grants
            for p in requirement.accepted
        )
        for grant in self.grants:
            if grant.revoke or (revoked and grant.database is None):
                continue
            if any(grant.covers(p, requirement.database, requirement.table) for p in requirement.accepted):
                return grant.grantee
        return None

    def check(self, requirements: Iterable[Requirement]) -> list[Verdict]:
        """Return one verdict per requirement, with the ``GRANT`` statement for each missing one."""
        verdicts = []
        for requirement in requirements:
            holder = self.granted_to(requirement)
            fix = "" if holder else f"GRANT {requirement} TO {self.account};"
            verdicts.append(Verdict(requirement, holder, fix))
        return verdicts

    def inactive_roles(self) -> list[str]:
        """Return roles granted to the account that a new session does not enable."""
        return [role for role in self.roles if role not in self.active_roles]

    def list_replicas_fix(self) -> str:
        """Return the statement that lets the account list registered replicas (the server_id check)."""
        return f"GRANT {self.privileges.list_replicas} ON *.* TO {self.account};"

    def default_role_fix(self, role: str) -> str:
        """Return the statement that enables ``role`` in the account's new sessions."""
        name = role.split("@", 1)[0]
        return self.privileges.default_role_statement.format(
            role=quote_identifier(name), account=self.account
        )


_NEEDED_PRIVILEGE = re.compile(r"you need \(at least one of\) the (.+?) privilege", re.IGNORECASE)
_COMMAND_DENIED = re.compile(
    r"^(\w+) command denied to user .+ for table [`']?([^`']+)[`']?(?:\.[`']?([^`']+)[`']?)?"
)


def fix_from_error(message: str, account: str, fixes: Sequence[str] = ()) -> str | None:
    """Return a ``GRANT`` statement for the privilege an access-denied error message names, if it names one.

    Understands 1227 "Access denied; you need (at least one of) the X, Y privilege(s) for this operation"
    and 1142 "X command denied to user 'u'@'h' for table `db`.`t`" (MySQL manual, "Server Error Message
    Reference"). Of several privileges it names the first that is not ``SUPER`` (the broad, deprecated one).

    :param fixes: statements already advised; None is returned when one of them grants a named privilege.
    """
    needed = _NEEDED_PRIVILEGE.search(message)
    if needed:
        names = [name.strip().upper() for name in needed.group(1).split(",") if name.strip()]
        if any(f"GRANT {name} ON" in fix for name in names for fix in fixes):
            return None
        chosen = next((name for name in names if name != "SUPER"), names[0])
        return f"GRANT {chosen} ON *.* TO {account};"
    denied = _COMMAND_DENIED.search(message)
    if denied and denied.group(3):
        level = f"{quote_identifier(denied.group(2))}.{quote_identifier(denied.group(3))}"
        fix = f"GRANT {denied.group(1).upper()} ON {level} TO {account};"
        return None if fix in fixes else fix
    return None


@dataclass(frozen=True)
class PrivilegeReport:
    """The verdict on every privilege the pipeline needs, for one account of one server.

    :param flavor: ``mysql`` or ``mariadb``.
    :param version: ``SELECT VERSION()``.
    :param grants: the account's active grants.
    :param verdicts: one per requirement, in :meth:`PrivilegeModel.requirements` order.
    """

    flavor: str
    version: str
    grants: Grants
    verdicts: list[Verdict]

    @property
    def missing(self) -> list[Verdict]:
        """Return the verdicts of the requirements no active grant covers."""
        return [v for v in self.verdicts if v.missing]

    def describe_missing(self) -> str:
        """Return one line per missing privilege, with what needs it and the statement that grants it."""
        lines = [
            f"  - {v.requirement}: the pipeline {v.requirement.purpose}; run {v.fix}" for v in self.missing
        ]
        for role in self.grants.inactive_roles():
            lines.append(
                f"  - role {quote_identifier(role.split('@', 1)[0])} is granted but not enabled in new sessions, so its "
                f"privileges do not count; if it holds the privileges above, run {self.grants.default_role_fix(role)} "
                "instead"
            )
        if self.grants.unparsed and self.missing:
            lines.append(f"  - (grants not understood, counted as granting nothing: {self.grants.unparsed})")
        return "\n".join(lines)

    def findings(self) -> list[Finding]:
        """Return the report as findings, one per privilege, unparsed grant line and role not enabled.

        A ``privilege`` finding per requirement (wrong when missing, with its ``GRANT``), a ``grant`` note per
        line not understood and a ``role`` note per granted role that new sessions do not enable.
        """
        account = f"{self.grants.user}@{self.grants.host}"
        findings = []
        for verdict in self.verdicts:
            requirement = verdict.requirement
            if verdict.missing:
                findings.append(
                    Finding(
                        "privilege",
                        str(requirement),
                        Outcome.WRONG,
                        f"missing: the pipeline {requirement.purpose}",
                        f"run {verdict.fix.rstrip(';')}",
                    )
                )
            elif verdict.granted_to == account:
                findings.append(Finding("privilege", str(requirement), Outcome.OK))
            else:
                findings.append(
                    Finding("privilege", str(requirement), Outcome.OK, f"(through role {verdict.granted_to})")
                )
        for line in self.grants.unparsed:
            findings.append(
                Finding("grant", line, Outcome.NOTE, "not understood, counted as granting nothing")
            )
        for role in self.grants.inactive_roles():
            findings.append(
                Finding(
                    "role",
                    role,
                    Outcome.NOTE,
                    "granted but not enabled in new sessions, so its privileges do not count",
                    f"run {self.grants.default_role_fix(role).rstrip(';')} to use them",
                )
            )
        return findings
