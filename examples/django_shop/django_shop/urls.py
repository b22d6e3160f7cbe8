from django.urls import path
from shop import views

urlpatterns = [
    path("orders/", views.place_order),
    path("orders/declined/", views.place_declined_order),
]
