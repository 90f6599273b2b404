#include "vips_shims.h"
#include <string.h>

static void fleet_quiet_log(const gchar *domain, GLogLevelFlags level, const gchar *message, gpointer data) {
    // libvips reports failures through vips_error_buffer(); its GLib warnings would only
    // reach standard error outside the fleet's JSON logs.
}

int fleet_vips_init(const char *program) {
    int result = VIPS_INIT(program);
    g_log_set_handler("VIPS", G_LOG_LEVEL_WARNING | G_LOG_LEVEL_MESSAGE | G_LOG_LEVEL_INFO, fleet_quiet_log, NULL);
    return result;
}

VipsImage *fleet_vips_open(const char *path, int fail_on) {
    return vips_image_new_from_file(path, "fail_on", (VipsFailOn) fail_on, NULL);
}

int fleet_vips_thumbnail(const char *path, VipsImage **out, int width, int height, int fail_on, const char *export_profile) {
    // A bound of 0 means "no bound on that side": VIPS_MAX_COORD lets the other side decide.
    int box_width = width > 0 ? width : VIPS_MAX_COORD;
    int box_height = height > 0 ? height : VIPS_MAX_COORD;
    if (export_profile == NULL) {
        return vips_thumbnail(path, out, box_width,
                              "height", box_height,
                              "size", VIPS_SIZE_DOWN,
                              "fail_on", (VipsFailOn) fail_on,
                              NULL);
    }
    return vips_thumbnail(path, out, box_width,
                          "height", box_height,
                          "size", VIPS_SIZE_DOWN,
                          "export_profile", export_profile,
                          "fail_on", (VipsFailOn) fail_on,
                          NULL);
}

int fleet_vips_flatten_white(VipsImage *in, VipsImage **out) {
    double white[3] = {255.0, 255.0, 255.0};
    VipsArrayDouble *background = vips_array_double_new(white, 3);
    int result = vips_flatten(in, out, "background", background, NULL);
    vips_area_unref(VIPS_AREA(background));
    return result;
}

int fleet_vips_to_srgb(VipsImage *in, VipsImage **out) {
    return vips_colourspace(in, out, VIPS_INTERPRETATION_sRGB, NULL);
}

int fleet_vips_jpeg_buffer(VipsImage *in, void **buffer, size_t *length, int quality) {
    return vips_jpegsave_buffer(in, buffer, length,
                                "Q", quality,
                                "optimize_coding", TRUE,
                                "strip", TRUE,
                                NULL);
}

int fleet_vips_pixel(VipsImage *in, int x, int y, double *values, int count) {
    double *vector = NULL;
    int n = 0;
    if (vips_getpoint(in, &vector, &n, x, y, NULL)) return -1;
    for (int i = 0; i < count; i++) values[i] = i < n ? vector[i] : 0;
    g_free(vector);
    return 0;
}

void fleet_g_free(void *pointer) {
    g_free(pointer);
}

void fleet_vips_unref(VipsImage *image) {
    if (image) g_object_unref(image);
}

VipsImage *fleet_vips_open_buffer(const void *data, size_t length, int fail_on) {
    return vips_image_new_from_buffer(data, length, "", "fail_on", (VipsFailOn) fail_on, NULL);
}

int fleet_vips_extract_band(VipsImage *in, VipsImage **out, int band, int count) {
    return vips_extract_band(in, out, band, "n", count, NULL);
}

int fleet_vips_resize_exact(VipsImage *in, VipsImage **out, int width, int height) {
    return vips_resize(in, out, (double) width / in->Xsize, "vscale", (double) height / in->Ysize, NULL);
}

int fleet_vips_bandjoin2(VipsImage *first, VipsImage *second, VipsImage **out) {
    return vips_bandjoin2(first, second, out, NULL);
}

int fleet_vips_cast_uchar(VipsImage *in, VipsImage **out) {
    return vips_cast(in, out, VIPS_FORMAT_UCHAR, "shift", TRUE, NULL);
}

int fleet_vips_bounds(VipsImage *in, double threshold, int *left, int *top, int *width, int *height) {
    double zero[1] = {0.0};
    VipsArrayDouble *background = vips_array_double_new(zero, 1);
    int result = vips_find_trim(in, left, top, width, height,
                                "threshold", threshold, "background", background, NULL);
    vips_area_unref(VIPS_AREA(background));
    return result;
}

int fleet_vips_crop(VipsImage *in, VipsImage **out, int left, int top, int width, int height) {
    return vips_crop(in, out, left, top, width, height, NULL);
}

int fleet_vips_png_buffer(VipsImage *in, void **buffer, size_t *length) {
    return vips_pngsave_buffer(in, buffer, length, "compression", 6, "strip", TRUE, NULL);
}

int fleet_vips_average(VipsImage *in, double *mean) {
    return vips_avg(in, mean, NULL);
}

/* The median of one channel's border values: robust to a garment touching part of the border. */
static int fleet_border_median(const unsigned char *pixels, int width, int height, int stride, int channel) {
    long histogram[256] = {0};
    long count = 0;
    for (int x = 0; x < width; x++) {
        histogram[pixels[(long) x * stride + channel]]++;
        histogram[pixels[((long) (height - 1) * width + x) * stride + channel]]++;
        count += 2;
    }
    for (int y = 1; y < height - 1; y++) {
        histogram[pixels[((long) y * width) * stride + channel]]++;
        histogram[pixels[((long) y * width + width - 1) * stride + channel]]++;
        count += 2;
    }
    long seen = 0;
    for (int value = 0; value < 256; value++) {
        seen += histogram[value];
        if (seen * 2 >= count) return value;
    }
    return 255;
}

int fleet_vips_plain_background_alpha(VipsImage *in, double threshold, double feather, VipsImage **out) {
    if (in->BandFmt != VIPS_FORMAT_UCHAR || in->Bands < 3) {
        vips_error("fleet", "%s", "plain-background removal needs an 8-bit RGB image");
        return -1;
    }
    VipsImage *memory = vips_image_copy_memory(in);
    if (!memory) return -1;
    const unsigned char *pixels = (const unsigned char *) VIPS_IMAGE_ADDR(memory, 0, 0);
    int width = memory->Xsize, height = memory->Ysize, stride = memory->Bands;
    long total = (long) width * height;
    int background[3];
    for (int c = 0; c < 3; c++) background[c] = fleet_border_median(pixels, width, height, stride, c);

    /* alpha starts opaque; background-coloured pixels connected to the border become clear. */
    unsigned char *alpha = g_malloc(total);
    long *stack = g_malloc(sizeof(long) * total);
    memset(alpha, 255, total);
    double limit = threshold * threshold;
    long top = 0;
#define FLEET_IS_BACKGROUND(i) ({ \
        const unsigned char *p = pixels + (i) * stride; \
        double dr = p[0] - background[0], dg = p[1] - background[1], db = p[2] - background[2]; \
        dr * dr + dg * dg + db * db <= limit; })
#define FLEET_PUSH(i) do { long j = (i); if (alpha[j] == 255 && FLEET_IS_BACKGROUND(j)) { alpha[j] = 0; stack[top++] = j; } } while (0)
    for (int x = 0; x < width; x++) { FLEET_PUSH(x); FLEET_PUSH((long) (height - 1) * width + x); }
    for (int y = 0; y < height; y++) { FLEET_PUSH((long) y * width); FLEET_PUSH((long) y * width + width - 1); }
    while (top > 0) {
        long i = stack[--top];
        int x = i % width, y = i / width;
        if (x > 0) FLEET_PUSH(i - 1);
        if (x < width - 1) FLEET_PUSH(i + 1);
        if (y > 0) FLEET_PUSH(i - width);
        if (y < height - 1) FLEET_PUSH(i + width);
    }
#undef FLEET_PUSH
#undef FLEET_IS_BACKGROUND
    g_free(stack);
    g_object_unref(memory);

    VipsImage *hard = vips_image_new_from_memory_copy(alpha, total, width, height, 1, VIPS_FORMAT_UCHAR);
    g_free(alpha);
    if (!hard) return -1;
    if (feather <= 0) {
        *out = hard;
        return 0;
    }
    VipsImage *soft = NULL;
    int result = vips_gaussblur(hard, &soft, feather, "precision", VIPS_PRECISION_INTEGER, NULL);
    g_object_unref(hard);
    if (result) return result;
    result = vips_cast(soft, out, VIPS_FORMAT_UCHAR, NULL);
    g_object_unref(soft);
    return result;
}

int fleet_vips_composite_over(VipsImage *base, VipsImage *overlay, int x, int y, VipsImage **out) {
    return vips_composite2(base, overlay, out, VIPS_BLEND_MODE_OVER, "x", x, "y", y, NULL);
}
