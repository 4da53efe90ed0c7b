/* The C API from C: load the model given on the command line, generate into a buffer and
 * through the chunk callback (the same samples), cancel from the progress callback, check the
 * errors of bad input, and free everything. Exits non-zero on the first failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aria.h"

#define CHECK(cond, ...)                                                     \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);             \
            fprintf(stderr, __VA_ARGS__);                                    \
            fprintf(stderr, " (last error: %s)\n", aria_last_error());      \
            return 1;                                                        \
        }                                                                    \
    } while (0)

struct Gather {
    float *buf;
    size_t len;
    size_t written;
    unsigned chunks;
    unsigned progress_calls;
    int cancel_at;
};

static int on_audio(void *user, uint32_t item, const float *samples, size_t frames,
                    uint32_t channels, size_t start, size_t total) {
    struct Gather *g = (struct Gather *)user;
    size_t at = start * channels, n = frames * channels;
    if (item != 0 || at + n > g->len || start + frames > total) return 1;
    memcpy(g->buf + at, samples, n * sizeof(float));
    g->written += n;
    g->chunks++;
    return 0;
}

static int on_progress(void *user, uint32_t done, uint32_t total) {
    struct Gather *g = (struct Gather *)user;
    g->progress_calls++;
    if (done > total) return 1;
    return g->cancel_at > 0 && (int)done >= g->cancel_at;
}

int main(int argc, char **argv) {
    CHECK(argc == 2, "usage: smoke MODEL_DIR");
    printf("aria %s\n", aria_version());
    AriaModel *m = NULL;
    CHECK(aria_model_load(argv[1], "{\"threads\": 2}", &m) == ARIA_STATUS_OK && m != NULL, "load");
    unsigned sr = aria_model_sample_rate(m), ch = aria_model_channels(m);
    CHECK(sr == 44100 && ch == 2, "rate %u channels %u", sr, ch);
    size_t frames = 0;
    CHECK(aria_model_frames(m, 0.5, &frames) == ARIA_STATUS_OK && frames == 22050, "frames %zu", frames);
    const char *req = "{\"prompt\": \"soft rain\", \"seconds\": 0.5, \"steps\": 2, \"seed\": 7}";

    /* Into caller memory; first with a buffer too small. */
    size_t len = frames * ch, written = 0;
    float *a = calloc(len, sizeof(float));
    CHECK(aria_generate_into(m, req, a, len - 1, &written, NULL, NULL) == ARIA_STATUS_TOO_SMALL &&
              written == len, "too small: written %zu", written);
    CHECK(aria_generate_into(m, req, a, len, &written, NULL, NULL) == ARIA_STATUS_OK && written == len,
          "into: written %zu of %zu", written, len);

    /* Through the callback: the same samples. */
    struct Gather g = {calloc(len, sizeof(float)), len, 0, 0, 0, 0};
    CHECK(aria_generate(m, req, on_progress, on_audio, &g) == ARIA_STATUS_OK, "callback");
    CHECK(g.written == len && g.chunks > 0 && g.progress_calls > 0, "callback: %zu of %zu",
          g.written, len);
    CHECK(memcmp(a, g.buf, len * sizeof(float)) == 0, "callback and buffer differ");
    float peak = 0;
    for (size_t i = 0; i < len; i++) peak = a[i] > peak ? a[i] : (-a[i] > peak ? -a[i] : peak);
    CHECK(peak > 0 && peak <= 1.0f, "peak %f", peak);

    /* Cancelled from the progress callback. */
    g.cancel_at = 2;
    CHECK(aria_generate(m, req, on_progress, on_audio, &g) == ARIA_STATUS_CANCELLED, "cancel");

    /* Bad input: one status and a message, never a crash. */
    CHECK(aria_generate(m, "{\"prompt\": 3}", NULL, NULL, NULL) == ARIA_STATUS_INVALID, "bad json");
    CHECK(strlen(aria_last_error()) > 0, "message");
    CHECK(aria_generate(m, "{\"prompt\": \"x\", \"seconds\": -1}", NULL, NULL, NULL) == ARIA_STATUS_INVALID,
          "negative seconds");
    CHECK(aria_generate(m, NULL, NULL, NULL, NULL) == ARIA_STATUS_INVALID, "null request");
    CHECK(aria_generate(NULL, req, NULL, NULL, NULL) == ARIA_STATUS_INVALID, "null model");
    CHECK(aria_generate(m, "{\"prompt\": \"x\", \"loras\": [{\"path\": \"/nonexistent.safetensors\"}]}",
                        NULL, NULL, NULL) == ARIA_STATUS_INVALID, "missing lora");
    AriaModel *bad = NULL;
    CHECK(aria_model_load("/nonexistent/model", NULL, &bad) == ARIA_STATUS_FAILED && bad == NULL, "bad model");
    CHECK(aria_model_load(argv[1], "{\"precision\": \"q3\"}", &bad) == ARIA_STATUS_INVALID, "bad option");

    /* A batch of two: both items, one after the other. */
    const char *batch = "{\"batch\": [{\"prompt\": \"rain\", \"seconds\": 0.5}, "
                        "{\"prompt\": \"wind\", \"seconds\": 0.5}], \"steps\": 2}";
    float *b = calloc(2 * len, sizeof(float));
    CHECK(aria_generate_into(m, batch, b, 2 * len, &written, NULL, NULL) == ARIA_STATUS_OK &&
              written == 2 * len, "batch: written %zu", written);

    free(a);
    free(b);
    free(g.buf);
    aria_model_free(m);
    aria_model_free(NULL);
    printf("ok\n");
    return 0;
}
