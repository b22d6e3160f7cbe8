from django.urls import path
from shop import views

urlpatterns = [
    path("orders/", views.place_order),
    path("orders/later/", views.place_order_later),
    path("orders/declined/", views.place_declined_order),
]
