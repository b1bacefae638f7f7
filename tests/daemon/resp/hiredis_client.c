/* A hiredis (C) client for the RESP front door: connects to the Unix socket in
 * argv[1] and runs SET/GET/MGET/DEL/EXISTS, a pipeline of appended commands and
 * a large binary value, checking every reply. Exit status 0 when all checks
 * pass; otherwise 1, with the failed check on stderr. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

static int checks = 0;

static void fail(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "resp_hiredis_client: check %d failed: ", checks);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static redisReply* expect_type(redisReply* reply, int type, const char* what) {
    ++checks;
    if (reply == NULL) {
        fail("%s: no reply (connection error)", what);
    }
    if (reply->type != type) {
        fail("%s: reply type %d, expected %d (%.*s)", what, reply->type, type,
             reply->type == REDIS_REPLY_ERROR || reply->type == REDIS_REPLY_STATUS ? (int)reply->len
                                                                                   : 0,
             reply->str ? reply->str : "");
    }
    return reply;
}

static void expect_status(redisReply* reply, const char* text, const char* what) {
    expect_type(reply, REDIS_REPLY_STATUS, what);
    if (strcmp(reply->str, text) != 0) {
        fail("%s: status '%s', expected '%s'", what, reply->str, text);
    }
    freeReplyObject(reply);
}

static void expect_bytes(redisReply* reply, const char* bytes, size_t len, const char* what) {
    expect_type(reply, REDIS_REPLY_STRING, what);
    if (reply->len != len || memcmp(reply->str, bytes, len) != 0) {
        fail("%s: %zu bytes differ from the %zu expected", what, (size_t)reply->len, len);
    }
}

static void expect_integer(redisReply* reply, long long value, const char* what) {
    expect_type(reply, REDIS_REPLY_INTEGER, what);
    if (reply->integer != value) {
        fail("%s: %lld, expected %lld", what, reply->integer, value);
    }
    freeReplyObject(reply);
}

int main(int argc, char** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: resp_hiredis_client SOCKET\n");
        return 2;
    }
    redisContext* c = redisConnectUnix(argv[1]);
    if (c == NULL || c->err) {
        fprintf(stderr, "resp_hiredis_client: connect: %s\n", c ? c->errstr : "out of memory");
        return 1;
    }

    const char binary[] = "bin\0ary\r\n$-1\r\n*value";
    const size_t binary_len = sizeof binary - 1;

    expect_status(redisCommand(c, "PING"), "PONG", "PING");
    expect_status(redisCommand(c, "SET %s %b", "hiredis:k", binary, binary_len), "OK", "SET");
    redisReply* r = redisCommand(c, "GET %s", "hiredis:k");
    expect_bytes(r, binary, binary_len, "GET");
    freeReplyObject(r);
    freeReplyObject(
        expect_type(redisCommand(c, "GET %s", "hiredis:missing"), REDIS_REPLY_NIL, "GET missing"));
    expect_status(redisCommand(c, "SET %s %s EX %d", "hiredis:ex", "v2", 100), "OK", "SET EX");

    r = expect_type(redisCommand(c, "MGET %s %s %s", "hiredis:k", "hiredis:missing", "hiredis:ex"),
                    REDIS_REPLY_ARRAY, "MGET");
    ++checks;
    if (r->elements != 3) {
        fail("MGET: %zu elements", (size_t)r->elements);
    }
    expect_bytes(r->element[0], binary, binary_len, "MGET[0]");
    expect_type(r->element[1], REDIS_REPLY_NIL, "MGET[1]");
    expect_bytes(r->element[2], "v2", 2, "MGET[2]");
    freeReplyObject(r);

    expect_integer(redisCommand(c, "EXISTS %s %s", "hiredis:k", "hiredis:missing"), 1, "EXISTS");
    expect_integer(redisCommand(c, "DEL %s", "hiredis:ex"), 1, "DEL");
    expect_integer(redisCommand(c, "DEL %s", "hiredis:ex"), 0, "DEL again");

    /* A pipeline: 500 SETs and 500 GETs appended, then the replies, in order. */
    enum { N = 500 };
    char key[64];
    char value[64];
    for (int i = 0; i < N; ++i) {
        snprintf(key, sizeof key, "hiredis:p%d", i);
        snprintf(value, sizeof value, "value-%d", i);
        redisAppendCommand(c, "SET %s %s", key, value);
    }
    for (int i = 0; i < N; ++i) {
        snprintf(key, sizeof key, "hiredis:p%d", i);
        redisAppendCommand(c, "GET %s", key);
    }
    for (int i = 0; i < N; ++i) {
        void* reply = NULL;
        if (redisGetReply(c, &reply) != REDIS_OK) {
            fail("pipelined SET %d: %s", i, c->errstr);
        }
        expect_status(reply, "OK", "pipelined SET");
    }
    for (int i = 0; i < N; ++i) {
        void* reply = NULL;
        if (redisGetReply(c, &reply) != REDIS_OK) {
            fail("pipelined GET %d: %s", i, c->errstr);
        }
        snprintf(value, sizeof value, "value-%d", i);
        expect_bytes(reply, value, strlen(value), "pipelined GET");
        freeReplyObject(reply);
    }

    /* A 4 MiB binary value. */
    const size_t big_len = 4u << 20;
    char* big = malloc(big_len);
    for (size_t i = 0; i < big_len; ++i) {
        big[i] = (char)(i * 2654435761u >> 13);
    }
    expect_status(redisCommand(c, "SET %s %b", "hiredis:big", big, big_len), "OK", "SET 4 MiB");
    r = redisCommand(c, "GET %s", "hiredis:big");
    expect_bytes(r, big, big_len, "GET 4 MiB");
    freeReplyObject(r);
    free(big);

    r = expect_type(redisCommand(c, "NOSUCHCOMMAND %s", "x"), REDIS_REPLY_ERROR, "unknown");
    ++checks;
    if (strncmp(r->str, "ERR unknown command", 19) != 0) {
        fail("unknown command: '%s'", r->str);
    }
    freeReplyObject(r);
    expect_status(redisCommand(c, "PING"), "PONG", "PING after an error");

    redisFree(c);
    printf("ok: %d checks\n", checks);
    return 0;
}
