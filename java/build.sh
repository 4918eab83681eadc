#!/usr/bin/env bash
# Builds rdq-java with nothing but the JDK and Debian's jars: compiles with every lint warning
# as an error, bundles the SQL of the Python plugin — its statements, fragments and schema
# migrations (one definition of the SQL for both languages; Sql.java compiles the statements
# at load time) —, runs the unit tests and writes build/rdq-java.jar and
# build/classpath (the runtime classpath, for the bridge and the tests). The test sources
# (JUnit tests, and the small programs rdq's Python tests run: io.rdq.harness) go to
# build/test-classes.
#
#   java/build.sh            build and run the unit tests
#   java/build.sh --no-test  build only
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"
JARS=${RDQ_JAVA_JARS:-/usr/share/java}
runtime=("$JARS/postgresql.jar" "$JARS/jackson-databind.jar" "$JARS/jackson-core.jar" "$JARS/jackson-annotations.jar")
testing=("$JARS/junit-jupiter-api.jar" "$JARS/junit-jupiter-params.jar" "$JARS/apiguardian-api.jar" "$JARS/opentest4j.jar" "$JARS/junit-platform-commons.jar")
for jar in "${runtime[@]}" "${testing[@]}" "$JARS/junit-platform-console-standalone.jar"; do
  [[ -f $jar ]] || { echo "missing $jar: install openjdk-17-jdk-headless libpostgresql-jdbc-java libjackson2-databind-java junit5" >&2; exit 1; }
done
cp_of() { local IFS=:; echo "$*"; }
# -Xlint:all minus "path" (Debian's jars name their dependencies in manifest Class-Path entries)
# and "processing" (no annotation processors run); every other warning fails the build.
lint=(-Xlint:all,-path,-processing -Werror)

rm -rf build
mkdir -p build/classes build/test-classes
find src/main/java -name '*.java' > build/sources
javac --release 17 -encoding UTF-8 "${lint[@]}" -d build/classes -cp "$(cp_of "${runtime[@]}")" @build/sources
# The plugin's SQL, beside io.rdq.postgres.Sql in the jar. RDQ_PG_MIGRATIONS: another folder of
# migrations (to build against a schema in the making).
sql=../packages/rdq-postgres/src/rdq_postgres/sql
migrations=${RDQ_PG_MIGRATIONS:-$sql/migrations}
out=build/classes/io/rdq/postgres/sql
mkdir -p "$out/migrations"
cp "$sql"/*.sql "$sql"/*.part "$out"/
cp "$migrations"/[0-9][0-9][0-9][0-9]_*.sql "$out/migrations"/
(cd "$out/migrations" && ls [0-9][0-9][0-9][0-9]_*.sql > index.txt)
jar --create --file build/rdq-java.jar -C build/classes .
echo "$here/build/rdq-java.jar:$(cp_of "${runtime[@]}")" > build/classpath

find src/test/java -name '*.java' > build/test-sources
javac --release 17 -encoding UTF-8 "${lint[@]}" -d build/test-classes \
  -cp "build/classes:$(cp_of "${runtime[@]}" "${testing[@]}")" @build/test-sources

if [[ ${1:-} != --no-test ]]; then
  java -jar "$JARS/junit-platform-console-standalone.jar" --disable-banner --details=summary \
    --fail-if-no-tests -cp "build/classes:build/test-classes:$(cp_of "${runtime[@]}")" --scan-classpath build/test-classes
fi
